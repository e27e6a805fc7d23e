"""Typed configuration: dataclasses, presets as plain functions and `--section.field=value` overrides
(the files: nmt.config_file).

The field names follow the paper (Vaswani et al., 2017, Table 3): ``n_layers`` (N), ``d_model``,
``d_ff``, ``n_heads`` (h), ``d_k``, ``d_v``, ``dropout`` (P_drop), ``label_smoothing`` (eps_ls,
in :class:`TrainConfig`) and ``positional`` (sinusoidal / learned positional encoding).
Every deviation from the paper is a named option whose default is the paper's choice.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Any, Literal, Optional

from .errors import UserError
from .vocab import PAD


class ConfigError(UserError, ValueError):
    """An invalid configuration value: the message names the field, the value and why; ``field``
    ("section.name") is the field it is about, when it is about one."""

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.field = field


def _check(ok: bool, name: str, value: Any, why: str) -> None:
    if not ok:
        raise ConfigError(f"{name}={value!r}: {why}", field=name)


@dataclass
class ModelConfig:
    """The architecture. Defaults are the paper's base model (section 3, Table 3 row 'base')."""

    src_vocab_size: int = 37000  # with share_embeddings, the one shared BPE vocabulary
    tgt_vocab_size: int = 37000
    n_layers: int = 6  # N, for the encoder and for the decoder
    # not in the paper: separate depths (None = N), fairseq's encoder_layers / decoder_layers. A deep
    # encoder with a shallow decoder (Kasai et al. 2021, "Deep Encoder, Shallow Decoder") decodes
    # faster: 6/1 at the Multi30k recipe's width costs 5-12% more than 3/3 per training step
    # (benchmarks/train_speed.py) and decodes 1.5x faster at beam 4 (benchmarks/translate_speed.py
    # --set n_encoder_layers=6 --set n_decoder_layers=1; results/speedrun/README.md)
    n_encoder_layers: Optional[int] = None
    n_decoder_layers: Optional[int] = None
    d_model: int = 512
    d_ff: int = 2048
    n_heads: int = 8  # h
    d_k: int = 64  # per-head query/key size, independent of d_model / h (Table 3 rows B)
    d_v: int = 64  # per-head value size
    dropout: float = 0.1  # P_drop: sublayer outputs and embedding+position sums (section 5.4)
    positional: Literal["sinusoidal", "learned"] = "sinusoidal"  # Table 3 row E
    max_positions: int = 1024  # table size for positions (learned) / precomputed (sinusoidal)
    # --- beyond the paper; defaults are the paper's choices ---
    norm_position: Literal["post", "pre"] = "post"  # post: LayerNorm(x + Dropout(Sublayer(x)))
    activation: Literal["relu", "gelu", "silu"] = "relu"  # FFN max(0, xW1+b1)W2+b2; silu: Marian's swish
    attention_dropout: float = 0.0  # dropout on attention weights (not in the paper)
    activation_dropout: float = 0.0  # dropout after the FFN activation (not in the paper)
    share_embeddings: bool = True  # one matrix: source emb, target emb, pre-softmax (section 3.4)
    tie_output: bool = True  # pre-softmax projection = target embedding (section 3.4)
    layer_norm_eps: float = 1e-5
    # section 3.4 multiplies the embeddings by sqrt(d_model); false: not scaled (a Marian model with
    # scale_embedding false, imported by nmt.imports)
    scale_embeddings: bool = True  # x sqrt(d_model) (section 3.4); false: not scaled (some Marian models)
    # not in the paper: a bias added to the output logits (Marian's final_logits_bias, OpenNMT-py's
    # generator bias; tied: decoder.output_bias, untied: the output projection's own bias)
    output_bias: bool = False  # a bias on the output logits (Marian, OpenNMT-py)
    # the source sentence ends with EOS (as `nmt prepare` writes it); false: the source is its pieces
    # only (OpenNMT-py models, as Argos packages hold them; CTranslate2's add_source_eos)
    source_eos: bool = True  # sources end with EOS; false: OpenNMT-py / Argos models
    # no pad_id: padding is nmt.vocab.PAD, the id `nmt prepare` writes (the special ids have one source)
    # restricted self-attention (section 4, Table 1, "self-attention (restricted)"): encoder and
    # decoder self-attention see only keys within distance r of the query; None = full (the paper's models)
    attention_window: Optional[int] = None
    # not in the paper: the decoder writes the target right to left (its last piece first). Such a
    # model rescores a left-to-right model's n-best (Liu et al. 2016; Sennrich et al. 2016's WMT
    # systems): `nmt translate L2R --rerank R2L` (nmt.infer.rerank). Training reverses each target;
    # translation reverses the output back, so its text reads as usual.
    right_to_left: bool = False

    @property
    def encoder_layers(self) -> int:
        """Encoder depth: n_encoder_layers, else N."""
        return self.n_layers if self.n_encoder_layers is None else self.n_encoder_layers

    @property
    def decoder_layers(self) -> int:
        """Decoder depth: n_decoder_layers, else N."""
        return self.n_layers if self.n_decoder_layers is None else self.n_decoder_layers

    def depth(self) -> str:
        """'N=3', or 'N=6/1' (encoder/decoder) when the depths differ: for logs and tables."""
        enc, dec = self.encoder_layers, self.decoder_layers
        return f"N={enc}" if enc == dec else f"N={enc}/{dec}"

    def validate(self) -> "ModelConfig":
        """ConfigError naming the first field that is out of range or contradicts another."""
        self._check_sizes()
        self._check_dropouts()
        self._check_choices()
        self._check_combinations()
        return self

    def _check_sizes(self) -> None:
        for name in (
            "src_vocab_size",
            "tgt_vocab_size",
            "n_layers",
            "d_model",
            "d_ff",
            "n_heads",
            "d_k",
            "d_v",
            "max_positions",
        ):
            value = getattr(self, name)
            _check(isinstance(value, int) and value > 0, f"model.{name}", value, "must be a positive integer")
        for name in ("n_encoder_layers", "n_decoder_layers"):
            value = getattr(self, name)
            _check(
                value is None or (isinstance(value, int) and value > 0),
                f"model.{name}",
                value,
                "must be a positive integer, or none for n_layers",
            )

    def _check_dropouts(self) -> None:
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            value = getattr(self, name)
            _check(0.0 <= value < 1.0, f"model.{name}", value, "must be in [0, 1)")

    def _check_choices(self) -> None:
        _check(
            self.positional in ("sinusoidal", "learned"),
            "model.positional",
            self.positional,
            "must be 'sinusoidal' or 'learned'",
        )
        _check(
            self.norm_position in ("post", "pre"),
            "model.norm_position",
            self.norm_position,
            "must be 'post' (the paper) or 'pre'",
        )
        _check(
            self.activation in ("relu", "gelu", "silu"),
            "model.activation",
            self.activation,
            "must be 'relu' (the paper) or 'gelu' (or 'silu', Marian's swish)",
        )

    def _check_combinations(self) -> None:
        """The fields that depend on others, and the options beyond the paper."""
        _check(
            self.positional != "sinusoidal" or self.d_model % 2 == 0,
            "model.d_model",
            self.d_model,
            "sinusoidal positional encoding needs an even d_model",
        )
        if self.share_embeddings:
            _check(
                self.src_vocab_size == self.tgt_vocab_size,
                "model.share_embeddings",
                True,
                f"a shared embedding needs src_vocab_size == tgt_vocab_size "
                f"(got {self.src_vocab_size} and {self.tgt_vocab_size}); "
                "set share_embeddings=false for separate vocabularies",
            )
        _check(
            math.isfinite(self.layer_norm_eps) and self.layer_norm_eps > 0,
            "model.layer_norm_eps",
            self.layer_norm_eps,
            "must be positive and finite",
        )
        _check(
            self.attention_window is None
            or (isinstance(self.attention_window, int) and self.attention_window >= 1),
            "model.attention_window",
            self.attention_window,
            "must be a positive integer or none",
        )
        _check(
            isinstance(self.right_to_left, bool),
            "model.right_to_left",
            self.right_to_left,
            "must be true or false",
        )


@dataclass
class TrainConfig:
    """Training (section 5). Defaults are the paper's base recipe."""

    max_tokens: int = 4096  # padded source (and target) tokens per micro-batch
    update_tokens: int = 25000  # target tokens per optimizer step, reached by accumulation (5.1)
    accum_steps: int = 0  # micro-batches per step; 0 = derived from update_tokens
    label_smoothing: float = 0.1  # eps_ls (5.4)
    # uniform: eps/V on every token (Szegedy et al., cited by the paper); fairseq: gold exactly
    # 1-eps, others eps/(V-1) (tensor2tensor, fairseq). See nmt/train/loss.py.
    label_smoothing_kind: Literal["uniform", "fairseq"] = "uniform"
    lr_scale: float = 1.0  # multiplies eq. 3
    warmup_steps: int = 4000
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_eps: float = 1e-9
    weight_decay: float = 0.0
    clip_norm: float = 0.0  # 0 = no clipping (the paper does not clip)
    max_steps: int = 100000  # base: 100k steps (5.2)
    max_epochs: int = 0  # 0 = no limit
    max_time: float = 0.0  # minutes; 0 = no limit
    # not in the paper: the last fraction of the run (of max_steps, or of max_time: then the decay's
    # length in updates is fixed when it starts, from the rate so far) multiplies eq. 3 by a factor
    # falling linearly to ~0, for short runs that stop long before eq. 3 has decayed. 0 = eq. 3 only.
    decay_fraction: float = 0.0
    # not in the paper: each decoder input token but BOS is replaced by <unk> with this probability
    # while training ("word dropout", Bowman et al. 2016), so that the decoder cannot lean on its
    # own history alone and must read the source; 0 = off (the paper).
    target_dropout: float = 0.0
    # not in the paper: train on the BPE-dropout segmentations that `nmt prepare --bpe-dropout`
    # wrote (epoch e on copy (e mod K) + 1; Provilkov et al. 2020) when the data has them; false = the
    # usual segmentation (an A/B on the same data folder). Translation always uses the usual one.
    bpe_dropout: bool = True
    seed: int = 1
    precision: Literal["fp32", "bf16", "fp16", "auto"] = "auto"
    save_every_steps: int = 0  # 0 = by time only
    save_every_minutes: float = 10.0  # the paper: a checkpoint every 10 minutes (6.1)
    keep_last: int = 20  # big models average the last 20 (6.1)
    valid_every_steps: int = 1000  # 0 = only at the end
    valid_bleu: bool = False  # also translate the valid split and compute BLEU
    valid_bleu_beam: int = 1  # 1 = greedy (fast); 4 = the paper's beam
    valid_bleu_max_sentences: int = 0  # 0 = all
    best_metric: Literal["loss", "bleu"] = "loss"
    patience: int = 0  # stop after this many validations without a better best_metric; 0 = never
    log_every_steps: int = 10
    num_threads: int = 0  # 0 = torch's default
    collective_timeout: float = 30.0  # minutes a multi-process collective may wait before the job fails

    def validate(self) -> "TrainConfig":
        """ConfigError naming the first field that is out of range or contradicts another."""
        self._check_counts()
        self._check_optimizer()
        self._check_stopping()
        self._check_options()
        return self

    def _check_counts(self) -> None:
        for name in ("max_tokens", "update_tokens", "warmup_steps", "log_every_steps", "keep_last"):
            value = getattr(self, name)
            _check(isinstance(value, int) and value > 0, f"train.{name}", value, "must be a positive integer")
        for name in (
            "accum_steps",
            "max_steps",
            "max_epochs",
            "save_every_steps",
            "valid_every_steps",
            "num_threads",
            "patience",
        ):
            _check(getattr(self, name) >= 0, f"train.{name}", getattr(self, name), "must be >= 0")

    def _check_optimizer(self) -> None:
        """The loss and Adam (sections 5.3, 5.4)."""
        _check(
            0.0 <= self.label_smoothing < 1.0,
            "train.label_smoothing",
            self.label_smoothing,
            "must be in [0, 1)",
        )
        _check(
            self.label_smoothing_kind in ("uniform", "fairseq"),
            "train.label_smoothing_kind",
            self.label_smoothing_kind,
            "must be 'uniform' (Szegedy et al.) or 'fairseq'",
        )
        _check(
            0.0 <= self.adam_beta1 < 1.0 and 0.0 <= self.adam_beta2 < 1.0,
            "train.adam_beta1/adam_beta2",
            (self.adam_beta1, self.adam_beta2),
            "must be in [0, 1)",
        )
        for name in ("adam_eps", "lr_scale"):  # inf: NaN weights from the first update
            value = getattr(self, name)
            _check(math.isfinite(value) and value > 0, f"train.{name}", value, "must be positive and finite")

    def _check_stopping(self) -> None:
        """When the run ends, its precision and what "best" means."""
        _check(
            self.max_steps or self.max_epochs or self.max_time,
            "train.max_steps",
            self.max_steps,
            "set at least one of max_steps, max_epochs, max_time",
        )
        _check(
            self.precision in ("fp32", "bf16", "fp16", "auto"),
            "train.precision",
            self.precision,
            "must be fp32, bf16, fp16 or auto",
        )
        _check(
            self.best_metric == "loss" or self.valid_bleu,
            "train.best_metric",
            self.best_metric,
            "best_metric=bleu needs valid_bleu=true",
        )

    def _check_options(self) -> None:
        """The options beyond the paper, and the limits that may be 0 (off)."""
        _check(
            0.0 <= self.target_dropout < 1.0, "train.target_dropout", self.target_dropout, "must be in [0, 1)"
        )
        _check(
            0.0 <= self.decay_fraction < 1.0, "train.decay_fraction", self.decay_fraction, "must be in [0, 1)"
        )
        _check(
            not self.decay_fraction or self.max_steps or self.max_time,
            "train.decay_fraction",
            self.decay_fraction,
            "needs max_steps or max_time (the decay is a fraction of the run)",
        )
        _check(
            math.isfinite(self.collective_timeout) and self.collective_timeout > 0,
            "train.collective_timeout",
            self.collective_timeout,
            "must be positive and finite (minutes)",
        )
        _check(self.valid_bleu_beam >= 1, "train.valid_bleu_beam", self.valid_bleu_beam, "must be >= 1")
        for name in (
            "clip_norm",
            "weight_decay",
            "max_time",
            "save_every_minutes",
            "valid_bleu_max_sentences",
        ):
            value = getattr(self, name)
            _check(math.isfinite(value) and value >= 0, f"train.{name}", value, "must be >= 0")


def train_preset(name: str) -> TrainConfig:
    """Training defaults to go with a model preset: the paper's for base/big, CPU-sized otherwise."""
    if name == "base":
        return TrainConfig()
    if name == "big":  # section 5.2: "The big models were trained for 300,000 steps (3.5 days)"
        return TrainConfig(max_steps=300000)
    if name == "small":  # Multi30k-sized data on a 2-core CPU: smaller batches, shorter warm-up
        return TrainConfig(
            max_tokens=2048,
            update_tokens=4096,
            warmup_steps=1000,
            lr_scale=2.0,
            max_steps=20000,
            save_every_minutes=5.0,
            keep_last=5,
            valid_every_steps=500,
        )
    if name == "tiny":
        return TrainConfig(
            max_tokens=1024,
            update_tokens=1024,
            warmup_steps=100,
            max_steps=200,
            save_every_minutes=0.0,
            save_every_steps=100,
            keep_last=3,
            valid_every_steps=100,
        )
    if name in ("student", "student-tiny"):
        # the Multi30k recipe's training (recipes/multi30k-en-de.yaml at a budget under 9,000 updates:
        # ~1k-token updates, warm-up 1,000 at lr_scale 0.5), bounded by time: a student's minutes
        # are counted against its teacher's (nmt distill; --train.max_time to change them)
        return TrainConfig(
            max_tokens=1024,
            update_tokens=1024,
            warmup_steps=1000,
            lr_scale=0.5,
            max_steps=100000,
            max_time=30.0,
            save_every_steps=200,
            save_every_minutes=0.0,
            keep_last=5,
            valid_every_steps=1000,
            valid_bleu=True,
            best_metric="bleu",
        )
    raise ConfigError(f"preset={name!r}: unknown preset; choose from {sorted(PRESETS)}")


# ----------------------------------------------------------------------------- presets
def base(vocab_size: int = 37000) -> ModelConfig:
    """The paper's base model: N=6, d_model=512, d_ff=2048, h=8, d_k=d_v=64, P_drop=0.1."""
    return ModelConfig(src_vocab_size=vocab_size, tgt_vocab_size=vocab_size)


def big(vocab_size: int = 37000) -> ModelConfig:
    """The paper's big model: d_model=1024, d_ff=4096, h=16 (d_k=d_v=64), P_drop=0.3."""
    return ModelConfig(
        src_vocab_size=vocab_size,
        tgt_vocab_size=vocab_size,
        d_model=1024,
        d_ff=4096,
        n_heads=16,
        d_k=64,
        d_v=64,
        dropout=0.3,
    )


def small(vocab_size: int = 8000) -> ModelConfig:
    """Not in the paper: a model these 2-core CPUs train in an hour (Multi30k-sized data)."""
    return ModelConfig(
        src_vocab_size=vocab_size,
        tgt_vocab_size=vocab_size,
        n_layers=3,
        d_model=256,
        d_ff=1024,
        n_heads=4,
        d_k=64,
        d_v=64,
        dropout=0.1,
    )


def tiny(vocab_size: int = 1000) -> ModelConfig:
    """Not in the paper: for tests and smoke runs."""
    return ModelConfig(
        src_vocab_size=vocab_size,
        tgt_vocab_size=vocab_size,
        n_layers=2,
        d_model=64,
        d_ff=128,
        n_heads=4,
        d_k=16,
        d_v=16,
        dropout=0.1,
        max_positions=256,
    )


def student(vocab_size: int = 8000) -> ModelConfig:
    """Not in the paper: a distilled student (`nmt distill`) for Multi30k-sized data, a deep encoder
    and a shallow decoder (Kasai et al. 2021; Bergamot's students): 6 encoder and 2 decoder layers
    at the `small` teacher's width. The encoder runs once per sentence, the decoder once per output
    piece and beam row: decoding costs about what the decoder's depth costs."""
    return dataclasses.replace(small(vocab_size), n_layers=6, n_encoder_layers=6, n_decoder_layers=2)


def student_tiny(vocab_size: int = 8000) -> ModelConfig:
    """Not in the paper: the faster student, 6 encoder layers and 1 decoder layer, every feed-forward
    half the `student`'s (d_ff 512)."""
    return dataclasses.replace(
        small(vocab_size), n_layers=6, n_encoder_layers=6, n_decoder_layers=1, d_ff=512
    )


PRESETS = {
    "base": base,
    "big": big,
    "small": small,
    "tiny": tiny,
    "student": student,
    "student-tiny": student_tiny,
}


def preset(name: str, vocab_size: Optional[int] = None) -> ModelConfig:
    if name not in PRESETS:
        raise ConfigError(f"preset={name!r}: unknown preset; choose from {sorted(PRESETS)}")
    return PRESETS[name]() if vocab_size is None else PRESETS[name](vocab_size)


# ----------------------------------------------------------------------------- (de)serialising
def to_dict(cfg: Any) -> dict:
    return dataclasses.asdict(cfg)


def from_dict(cls: type, data: dict, *, section: str = "model") -> Any:
    """Build ``cls`` from a dict, type-checking each value; unknown keys are an error."""
    names = {f.name for f in dataclasses.fields(cls)}
    if cls is ModelConfig and "pad_id" in data:  # config.json written before the field was removed
        data = dict(data)
        legacy = _coerce(int, data.pop("pad_id"), f"{section}.pad_id")
        _check(
            legacy == PAD,
            f"{section}.pad_id",
            legacy,
            f"padding is token {PAD} in nmt "
            "(nmt.vocab.PAD, the id `nmt prepare` writes); the field is no longer settable",
        )
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(
            f"{section}.{unknown[0]}: unknown field; valid fields: {sorted(names)}",
            field=f"{section}.{unknown[0]}",
        )
    hints = typing.get_type_hints(cls)
    values = {k: _coerce(hints[k], v, f"{section}.{k}") for k, v in data.items()}
    obj = cls(**values)
    return obj.validate() if hasattr(obj, "validate") else obj


def _coerce(tp: Any, value: Any, name: str) -> Any:
    """Convert ``value`` (a Python value or a command-line string) to the annotated type."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union:  # Optional[X]
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            if type(None) in args:
                return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(inner[0], value, name)
    if origin is Literal:
        _check(value in args, name, value, f"must be one of {list(args)}")
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "false", "0", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{name}={value!r}: expected a boolean (true/false)", field=name)
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"{name}={value!r}: expected an integer", field=name)
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        try:
            return int(str(value).replace("_", ""))
        except ValueError:
            raise ConfigError(f"{name}={value!r}: expected an integer", field=name) from None
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{name}={value!r}: expected a number", field=name)
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name}={value!r}: expected a number", field=name) from None
    if tp is str:
        return str(value)
    return value


def parse_overrides(args: list[str]) -> dict[str, dict[str, str]]:
    """``["--model.d_ff=1024", "--train.lr_scale", "2"]`` -> ``{"model": {"d_ff": "1024"}, ...}``."""
    out: dict[str, dict[str, str]] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or "." not in arg.split("=")[0]:
            raise ConfigError(f"{arg}: unrecognised argument (overrides look like --model.d_ff=1024)")
        key, eq, value = arg[2:].partition("=")
        if not eq:
            if i + 1 >= len(args):
                raise ConfigError(f"{arg}: missing value")
            value = args[i + 1]
            i += 1
        section, _, name = key.partition(".")
        out.setdefault(section, {})[name] = value
        i += 1
    return out


def apply_overrides(cfg: Any, overrides: dict[str, str], *, section: str) -> Any:
    """Return a copy of dataclass ``cfg`` with string overrides converted to the field types."""
    merged = {**to_dict(cfg), **overrides}
    return from_dict(type(cfg), merged, section=section)
