"""`nmt import ctranslate2 DIR`: a CTranslate2 Transformer (TransformerSpec: what CTranslate2's
OpenNMT-py, OpenNMT-tf and fairseq converters and `nmt export ctranslate2` write) as an nmt checkpoint.

Read directly: model.bin (nmt.imports.model_bin), config.json (special tokens, add_source_eos, the
LayerNorm epsilon), the vocabulary (shared_vocabulary.json or .txt; source and target vocabularies
only when they are the same) and a SentencePiece model (DIR/spm.model, or one given: an Argos
package's). The mapping is nmt.export.ctranslate2's read backwards: q/k/v split from the fused
projections, pre-norm (OpenNMT-py, Argos) or post-norm with the final LayerNorms, the explicit
position table recognised as nmt's sinusoidal one (else kept as a learned table), the output bias of
the projection kept (ModelConfig.output_bias), the special tokens moved to nmt's ids
(nmt.imports.vocabulary). Relative positions, rotary or ALiBi encodings, multi-query attention,
source features and embedding LayerNorms are refused with the reason.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from ..config import ConfigError, ModelConfig
from .imported import ModelImportError, check_out_dir, write_checkpoint
from .model_bin import ModelBin, read_model_bin
from .vocabulary import PAD_LOGIT, VocabularyError, joint_spm, load_processor, permute_rows, special_ids

ACTIVATIONS = {0: "relu", 2: "silu", 3: "gelu"}  # CTranslate2's Activation ids nmt has
NAMES = {1: "GELUTanh", 4: "GELUSigmoid", 5: "Tanh", 6: "Sigmoid"}
UNSUPPORTED = ("relative_position", "relative_attention_bias", "rotary", "alibi", "layernorm_embedding")
OLD_HEADS = {"TransformerBase": 8, "TransformerBig": 16}  # binary version 1-2 specs by name


def read_vocabulary(folder: Path) -> list[str]:
    """The tokens in id order: shared_vocabulary.{json,txt}, or identical source/target ones."""

    def one(stem: str) -> list[str] | None:
        for ext in ("json", "txt"):
            path = folder / f"{stem}.{ext}"
            if path.is_file():
                text = path.read_text(encoding="utf-8")
                try:
                    return json.loads(text) if ext == "json" else text.rstrip("\n").split("\n")
                except json.JSONDecodeError as e:
                    raise ModelImportError(f"{path}: not valid JSON ({e})") from None
        return None

    shared = one("shared_vocabulary")
    if shared is None:
        src, tgt = one("source_vocabulary"), one("target_vocabulary")
        if src is None or tgt is None:
            raise ModelImportError(
                f"{folder}: no shared_vocabulary.json (or .txt, or source/target vocabularies)"
            )
        if src != tgt:
            raise ModelImportError(f"{folder}: separate source and target vocabularies are not supported")
        shared = src
    if not isinstance(shared, list) or not all(isinstance(t, str) for t in shared):
        raise ModelImportError(f"{folder}: the vocabulary is not a list of tokens")
    return shared


def check_supported(m: ModelBin, path: Path) -> None:
    """ModelImportError for the TransformerSpec options nmt's Transformer lacks."""
    if m.spec not in ("TransformerSpec", *OLD_HEADS) and m.version >= 2:
        raise ModelImportError(
            f"{path}: a {m.spec}; nmt imports encoder-decoder Transformers (TransformerSpec)"
        )
    for name, t in m.variables.items():
        leaf = name.rsplit("/", 1)[-1]
        if any(u in name for u in UNSUPPORTED) and (t.dim() > 0 or t.item()):
            raise ModelImportError(f"{path}: {name}: nmt has no {leaf.replace('_', ' ')}")
        if leaf == "multi_query_attention" and t.item() or "embeddings_1" in name or "num_heads_kv" in name:
            raise ModelImportError(
                f"{path}: {name}: multi-query attention and source features are not supported"
            )


def embedding_scale(m: ModelBin, side: str, d_model: int) -> bool:
    """Whether ``side`` scales its embeddings by sqrt(d_model): a flag (int8), or the factor itself
    (float: sqrt(d_model), or 1 for none)."""
    t = m.variables.get(f"{side}/scale_embeddings", m.variables.get("scale_embeddings"))
    if t is None or not t.is_floating_point():
        return True if t is None else bool(t.item())
    if abs(t.item() - math.sqrt(d_model)) < 1e-4 * math.sqrt(d_model):
        return True
    if t.item() in (0.0, 1.0):
        return False
    raise ModelImportError(
        f"model.bin: {side} embeddings scaled by {t.item()}; nmt scales by sqrt(d_model) or 1"
    )


def attributes(m: ModelBin, path: Path) -> dict:
    """num_heads, pre_norm, activation (encoder and decoder must agree)."""
    out = {}
    for key, default in (("num_heads", OLD_HEADS.get(m.spec)), ("pre_norm", True), ("activation", 0)):
        enc, dec = (m.scalar(f"{side}/{key}", key, default=default) for side in ("encoder", "decoder"))
        if enc != dec or enc is None:
            raise ModelImportError(f"{path}: {key} is {enc} in the encoder and {dec} in the decoder")
        out[key] = enc
    if out["activation"] not in ACTIVATIONS:
        name = NAMES.get(out["activation"], out["activation"])
        raise ModelImportError(f"{path}: activation {name}; nmt has {', '.join(ACTIVATIONS.values())}")
    return out


def count_layers(m: ModelBin, side: str) -> int:
    n = 0
    while any(k.startswith(f"{side}/layer_{n}/") for k in m.variables):
        n += 1
    return n


def ct2_sinusoids(n_positions: int, d_model: int) -> torch.Tensor:
    """CTranslate2's own table where model.bin holds none (tensor2tensor's: positions from 1,
    [sin | cos] halves, timescales 10000^(i / (D/2 - 1)))."""
    half = d_model // 2
    timescales = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000.0) / (half - 1)))
    scaled = torch.arange(1, n_positions + 1, dtype=torch.float32)[:, None] * timescales[None]
    return torch.cat([torch.sin(scaled), torch.cos(scaled)], dim=1)


def positions(m: ModelBin, d_model: int) -> tuple[str, dict[str, torch.Tensor], int]:
    """('sinusoidal', {}, n) when the tables of n positions are nmt's own, else ('learned', the
    two tables, n)."""
    from ..model import sinusoidal_table

    tables = {}
    for side in ("encoder", "decoder"):
        t = m.variables.get(f"{side}/position_encodings/encodings")
        tables[side] = ct2_sinusoids(1024, d_model) if t is None else t.float()
    enc, dec = tables["encoder"], tables["decoder"]
    if enc.shape == dec.shape and torch.equal(enc, dec):
        if torch.allclose(enc, sinusoidal_table(enc.shape[0], d_model), atol=1e-5):
            return "sinusoidal", {}, enc.shape[0]
    if enc.shape != dec.shape:
        raise ModelImportError("model.bin: the encoder and decoder position tables differ in size")
    tables = {"encoder.embed.embed_positions.weight": enc, "decoder.embed.embed_positions.weight": dec}
    return "learned", tables, enc.shape[0]


def _linear(m: ModelBin, scope: str, out: dict, name: str, rows: slice | None = None) -> None:
    """nmt's ``name``.weight/.bias from CTranslate2's linear ``scope`` (``rows``: a part of a fused one)."""
    weight = m.variables.get(f"{scope}/weight")
    if weight is None:
        raise ModelImportError(f"model.bin: {scope}/weight missing")
    bias = m.variables.get(f"{scope}/bias", torch.zeros(weight.shape[0]))
    rows = rows or slice(None)
    out[f"{name}.weight"], out[f"{name}.bias"] = weight[rows].float(), bias[rows].float()


def _norm(m: ModelBin, scope: str, out: dict, name: str) -> None:
    if f"{scope}/gamma" not in m.variables:
        raise ModelImportError(f"model.bin: {scope}/gamma missing")
    if f"{scope}/beta" not in m.variables:
        raise ModelImportError(f"model.bin: {scope} is an RMSNorm (no beta); nmt's LayerNorms have a bias")
    out[f"{name}.weight"] = m.variables[f"{scope}/gamma"].float()
    out[f"{name}.bias"] = m.variables[f"{scope}/beta"].float()


def _attention(m: ModelBin, scope: str, out: dict, name: str, d: int, *, self_attention: bool) -> None:
    """Self-attention: linear_0 = [q; k; v], linear_1 = out; cross-attention: linear_0 = q,
    linear_1 = [k; v], linear_2 = out (nmt.export.ctranslate2's fusion read back)."""
    parts = [f"{scope}/linear_0"] * 3 if self_attention else [f"{scope}/linear_0"] + [f"{scope}/linear_1"] * 2
    starts = (0, d, 2 * d) if self_attention else (0, 0, d)
    for proj, part, start in zip(("q_proj", "k_proj", "v_proj"), parts, starts):
        _linear(m, part, out, f"{name}.{proj}", slice(start, start + d))
    _linear(m, f"{scope}/linear_{1 if self_attention else 2}", out, f"{name}.out_proj")
    _norm(m, f"{scope}/layer_norm", out, f"{name}_layer_norm")


def layer_state(m: ModelBin, n_enc: int, n_dec: int, d: int) -> dict[str, torch.Tensor]:
    """Every layer's tensors under nmt's names (fairseq's, as nmt.model)."""
    out: dict[str, torch.Tensor] = {}
    for side, n in (("encoder", n_enc), ("decoder", n_dec)):
        for i in range(n):
            scope, name = f"{side}/layer_{i}", f"{side}.layers.{i}"
            _attention(m, f"{scope}/self_attention", out, f"{name}.self_attn", d, self_attention=True)
            if side == "decoder":
                _attention(m, f"{scope}/attention", out, f"{name}.encoder_attn", d, self_attention=False)
            _norm(m, f"{scope}/ffn/layer_norm", out, f"{name}.final_layer_norm")
            _linear(m, f"{scope}/ffn/linear_0", out, f"{name}.fc1")
            _linear(m, f"{scope}/ffn/linear_1", out, f"{name}.fc2")
    return out


def read_config(folder: Path) -> dict:
    path = folder / "config.json"
    if not path.is_file():
        return {}  # models of CTranslate2 before 3.0: the defaults below
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelImportError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(config, dict):
        raise ModelImportError(f"{path}: expected a JSON object")
    if config.get("add_source_bos"):
        raise ModelImportError(f"{path}: add_source_bos: nmt's sources start with their first piece")
    return config


def vocabulary_map(tokens: list[str], config: dict, folder: Path, m: ModelBin):
    """nmt.imports.vocabulary's map of CTranslate2's tokens (padding: <blank>, else <pad>, else none).
    A decoder that starts from a zero embedding (``start_from_zero_embedding``: CTranslate2's Marian
    models) starts from the padding's row, which must be zero."""

    def index(token: str, what: str) -> int:
        if token not in tokens:
            raise ModelImportError(f"{folder}: the {what} token {token!r} is not in the vocabulary")
        return tokens.index(token)

    eos = config.get("eos_token", "</s>")
    start = config.get("decoder_start_token", config.get("bos_token", "<s>")) or eos
    pad = next((tokens.index(t) for t in ("<blank>", "<pad>") if t in tokens), None)
    zero_start = m.scalar("decoder/start_from_zero_embedding", default=0)
    try:
        return special_ids(
            tokens,
            pad=pad,
            unk=index(config.get("unk_token", "<unk>"), "unknown"),
            eos=index(eos, "end"),
            start=None if zero_start else index(start, "decoder start"),
            source=str(folder),
        )
    except VocabularyError as e:
        raise ModelImportError(str(e)) from None


def embedding_state(m: ModelBin, vocab, n_tokens: int) -> tuple[dict, bool, bool, bool]:
    """The token tables and the output projection in nmt's ids: (state, share_embeddings,
    tie_output, output_bias)."""
    enc = m.variables.get("encoder/embeddings_0/weight", m.variables.get("encoder/embeddings/weight"))
    dec, proj = m.variables.get("decoder/embeddings/weight"), m.variables.get("decoder/projection/weight")
    if enc is None or dec is None or proj is None:
        raise ModelImportError("model.bin: no encoder/decoder embeddings or output projection")
    for name, t in (("encoder embeddings", enc), ("decoder embeddings", dec), ("output projection", proj)):
        if t.shape[0] != n_tokens:
            raise ModelImportError(
                f"model.bin: the {name} have {t.shape[0]} rows, the vocabulary {n_tokens} tokens"
            )
    share, tie = torch.equal(enc, dec), torch.equal(dec, proj)
    bias = m.variables.get("decoder/projection/bias")
    if bias is None and vocab.new_rows:  # the new rows' logits: PAD_LOGIT
        bias = torch.zeros(n_tokens)
    state = {"encoder.embed_tokens.weight": permute_rows(enc.float(), vocab)}
    if not share:
        state["decoder.embed_tokens.weight"] = permute_rows(dec.float(), vocab)
    if not tie:
        state["decoder.output_projection.weight"] = permute_rows(proj.float(), vocab)
    if bias is not None:
        key = "decoder.output_bias" if tie else "decoder.output_projection.bias"
        state[key] = permute_rows(bias.float(), vocab, fill=PAD_LOGIT)
    return state, share, tie, bias is not None


def model_config(m: ModelBin, attrs: dict, config: dict, shapes: dict) -> ModelConfig:
    """nmt's ModelConfig of the model.bin (dropouts: those `nmt export` recorded, else 0.1)."""
    d, heads = shapes["d_model"], int(attrs["num_heads"])
    try:
        return ModelConfig(
            src_vocab_size=shapes["vocab"],
            tgt_vocab_size=shapes["vocab"],
            n_layers=shapes["encoder"],
            n_encoder_layers=None if shapes["encoder"] == shapes["decoder"] else shapes["encoder"],
            n_decoder_layers=None if shapes["encoder"] == shapes["decoder"] else shapes["decoder"],
            d_model=d,
            d_ff=shapes["d_ff"],
            n_heads=heads,
            d_k=d // heads,
            d_v=d // heads,
            positional=shapes["positional"],
            max_positions=shapes["positions"],
            norm_position="pre" if attrs["pre_norm"] else "post",
            activation=ACTIVATIONS[attrs["activation"]],
            share_embeddings=shapes["share"],
            tie_output=shapes["tie"],
            output_bias=shapes["bias"],
            scale_embeddings=bool(attrs["scale_embeddings"]),
            layer_norm_eps=float(config.get("layer_norm_epsilon") or 1e-5),  # CTranslate2's default
            source_eos=bool(config.get("add_source_eos", False)),
            **shapes["dropouts"],
        ).validate()
    except ConfigError as e:
        raise ModelImportError(f"model.bin: not a model nmt can hold ({e})") from None


def exported_dropouts(folder: Path) -> dict:
    """The dropouts `nmt export ctranslate2` recorded in nmt_export.json (else {})."""
    try:
        saved = json.loads((folder / "nmt_export.json").read_text(encoding="utf-8"))["model"]
        return {k: float(saved[k]) for k in ("dropout", "attention_dropout", "activation_dropout")}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def model_and_state(m: ModelBin, vocab, config: dict, folder: Path) -> tuple[ModelConfig, dict]:
    """nmt's ModelConfig and state dict of the model.bin ``m``."""
    attrs = attributes(m, folder / "model.bin")
    emb, share, tie, bias = embedding_state(m, vocab, len(vocab.order) - vocab.new_rows)
    d = emb["encoder.embed_tokens.weight"].shape[1]
    attrs["scale_embeddings"] = embedding_scale(m, "encoder", d)
    if embedding_scale(m, "decoder", d) != attrs["scale_embeddings"]:
        raise ModelImportError(
            f"{folder / 'model.bin'}: the encoder and decoder scale their embeddings differently"
        )
    positional, tables, n_positions = positions(m, d)
    n_enc, n_dec = count_layers(m, "encoder"), count_layers(m, "decoder")
    if not n_enc or not n_dec:
        raise ModelImportError(f"{folder / 'model.bin'}: no encoder or decoder layers")
    state = {**emb, **tables, **layer_state(m, n_enc, n_dec, d)}
    if attrs["pre_norm"]:
        _norm(m, "encoder/layer_norm", state, "encoder.layer_norm")
        _norm(m, "decoder/layer_norm", state, "decoder.layer_norm")
    shapes = {
        "vocab": len(vocab.order),
        "d_model": d,
        "d_ff": state["encoder.layers.0.fc1.weight"].shape[0],
        "encoder": n_enc,
        "decoder": n_dec,
        "positional": positional,
        "positions": n_positions,
        "share": share,
        "tie": tie,
        "bias": bias,
        "dropouts": exported_dropouts(folder),
    }
    return model_config(m, attrs, config, shapes), state


def import_ctranslate2(
    source: str | Path,
    out_dir: str | Path,
    *,
    spm_model: str | Path | None = None,
    data: dict | None = None,
    source_eos: bool | None = None,
    log=print,
) -> Path:
    """`nmt import ctranslate2`: the CTranslate2 model directory ``source`` (with ``spm_model``, by
    default its spm.model) as the nmt checkpoint ``out_dir`` (new or empty), written atomically.
    ``source_eos``: whether sources end with EOS (None: config.json's add_source_eos; a model
    converted from transformers expects its tokenizer's </s> although it says false)."""
    from ..checkpoint import CheckpointError, load_weights
    from ..model import Transformer

    folder = Path(source)
    out = check_out_dir(out_dir, folder)
    if not (folder / "model.bin").is_file():
        raise ModelImportError(
            f"{folder / 'model.bin'}: missing (a CTranslate2 model directory holds model.bin)"
        )
    spm_path = Path(spm_model) if spm_model is not None else folder / "spm.model"
    if not spm_path.is_file():
        raise ModelImportError(f"{spm_path}: missing (the SentencePiece model of the vocabulary)")
    spm_bytes = spm_path.read_bytes()
    load_processor(spm_bytes, source=str(spm_path))
    config, tokens = read_config(folder), read_vocabulary(folder)
    if source_eos is not None:
        config["add_source_eos"] = source_eos
    m = read_model_bin(folder / "model.bin")
    check_supported(m, folder / "model.bin")
    vocab = vocabulary_map(tokens, config, folder, m)
    cfg, state = model_and_state(m, vocab, config, folder)
    model = Transformer(cfg)
    try:
        load_weights(model, state, source=str(folder / "model.bin"))
    except CheckpointError as e:
        raise ModelImportError(str(e)) from None
    try:
        spm_out, missing = joint_spm(spm_bytes, vocab.pieces, source=str(spm_path))
    except VocabularyError as e:
        raise ModelImportError(str(e)) from None
    if missing:
        log(
            f"nmt import: {missing} pieces of {spm_path.name} are not in the vocabulary "
            "(CTranslate2 reads them as <unk>)"
        )
    record = {
        "format": "ctranslate2",
        "source": str(source),
        "binary_version": m.version,
        "vocabulary": len(tokens),
    }
    return write_checkpoint(
        out, model.eval(), spm_bytes=spm_out, target_spm_bytes=None, record=record, data=data or {}
    )
