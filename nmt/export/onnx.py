"""`nmt export onnx`: an nmt checkpoint as ONNX graphs, and greedy translation with ONNX Runtime.

Axis legend as in nmt.model: B batch, S source length, T target prefix length, t positions already
in the cache, D d_model, H heads, K / V per-head key / value size, W vocabulary, L decoder layers.

The directory holds
  * ``encoder.onnx``: src_tokens (B, S) int64, padded with PAD -> memory (B, S, D) float32 and, for
    each decoder layer i < L, the memory's encoder-decoder keys ``cross_k_i`` (B, H, S, K) and values
    ``cross_v_i`` (B, H, S, V), computed once per sentence (nmt's ``Decoder.empty_cache``);
  * ``decoder_step.onnx``, the cached step (nmt's ``Decoder.run_layers`` with a key/value cache, as
    ``Transformer.decode_step``): tokens (B, 1) int64 (the last token), position () int64 (its
    position, = t), src_padding_mask (B, S) bool (True = padding), cross_k_i / cross_v_i, and the
    self-attention keys ``past_k_i`` (B, H, t, K) and values ``past_v_i`` (B, H, t, V) of positions
    0..t-1 (t = 0 at the first step) -> log_probs (B, W) of the next token, and ``present_k_i``
    (B, H, t+1, K) / ``present_v_i`` (B, H, t+1, V), the next step's past. One step costs O(t);
  * ``decoder.onnx``, the full-prefix step (no cache): tgt_tokens (B, T) int64 (BOS + the output so
    far), memory (B, S, D), src_tokens (B, S) -> log_probs (B, W) of the next token. It reads the
    whole prefix at every step (O(T^2) per sentence); kept as the reference the cached step is
    tested against and as the uncached baseline of benchmarks/onnx_decode.py;
  * ``spm.model``, ``nmt_export.json`` (nmt's model configuration, the token ids, the languages, the
    graphs' input and output names) and a ``README.md``.
The graphs come from ``torch.onnx.export`` (the TorchScript exporter, opset 17) of the model's own
code, every batch and length axis dynamic. The full-prefix decoder's causal mask is built as a
tensor of the traced length (nmt's SDPA flag ``is_causal`` is a Python bool the trace would freeze).
The cached step runs nmt's decoder layers on ``LayerCache``s whose self-attention buffers are
``PastBuffer``s: where nmt writes a step's keys into a preallocated buffer, the graph appends them
to the past (a concatenation, so that t is a dynamic axis). ``OnnxTranslator`` translates greedily
with the encoder and the cached step (or, ``cached=False``, the full-prefix decoder), B sentences at
once, by the rules of nmt.infer.search (PAD and BOS never generated, at most a*|x|+b tokens, EOS
included).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .ctranslate2 import ExportError, check_full_attention, check_left_to_right, check_out_dir

if TYPE_CHECKING:
    import numpy as np

    from ..config import ModelConfig

OPSET = 17

README = """# ONNX export of an nmt checkpoint

Written by `nmt export onnx` from {source}. Ids: PAD {pad}, UNK {unk}, BOS {bos}, EOS {eos}; each
source sentence is its SentencePiece pieces (`spm.model`) + EOS, padded with PAD. i counts the
{layers} decoder layers; H = {heads}, K = {d_k}, V = {d_v}.

- `encoder.onnx`: src_tokens (B, S) int64 -> memory (B, S, D), and per layer the memory's keys
  cross_k_i (B, H, S, K) and values cross_v_i (B, H, S, V) (computed once per sentence).
- `decoder_step.onnx` (the cached step): tokens (B, 1) int64 (the last token: BOS first), position
  () int64 (its position, = t), src_padding_mask (B, S) bool (True = PAD), cross_k_i, cross_v_i,
  past_k_i (B, H, t, K), past_v_i (B, H, t, V) (t = 0 at the first step) -> log_probs (B, W) of the
  next token, present_k_i (B, H, t+1, K), present_v_i (B, H, t+1, V): the next step's past.
- `decoder.onnx` (no cache): tgt_tokens (B, T) = BOS + the output so far, memory, src_tokens ->
  log_probs (B, W) of the next token (the whole prefix is fed at every step).
- `nmt_export.json`: the model's configuration, the ids and every graph's input and output names.

    from nmt.export.onnx import OnnxTranslator
    OnnxTranslator.load("{out}").translate(["..."])   # greedy with the cached step, onnxruntime
"""


def import_onnxruntime():
    try:
        import onnxruntime
    except ImportError:
        raise ExportError(
            "onnxruntime is not installed: pip install 'nmt[onnx]' (onnx==1.23.2, onnxruntime==1.32.0)"
        ) from None
    return onnxruntime


def layer_names(prefix: str, n_layers: int) -> list[str]:
    """The per-layer key/value names of the graphs: prefix_k_0, prefix_v_0, prefix_k_1, ..."""
    return [f"{prefix}_{kv}_{i}" for i in range(n_layers) for kv in ("k", "v")]


def graph_names(n_layers: int) -> dict[str, dict[str, list[str]]]:
    """Each graph's input and output names, in order (written into nmt_export.json)."""
    cross = layer_names("cross", n_layers)
    return {
        "encoder": {"inputs": ["src_tokens"], "outputs": ["memory", *cross]},
        "decoder_step": {
            "inputs": ["tokens", "position", "src_padding_mask", *cross, *layer_names("past", n_layers)],
            "outputs": ["log_probs", *layer_names("present", n_layers)],
        },
        "decoder": {"inputs": ["tgt_tokens", "memory", "src_tokens"], "outputs": ["log_probs"]},
    }


def traced_causal_mask(t, start: int, device) -> tuple:
    """Decoder.self_attention_mask for the trace of the full-prefix decoder: query i sees keys
    0..i, a (T, T) tensor of the traced length T (start is 0: the whole prefix is fed)."""
    import torch

    return torch.ones(t, t, dtype=torch.bool, device=device).tril(), False  # (T, T) True = attend


def one_query_mask(t, start, device) -> tuple:
    """Decoder.self_attention_mask for the trace of the cached step: its one query sees every
    position, no mask (nmt's own t == 1 case, whose flag ``t > 1`` the trace would make a tensor)."""
    return None, False


@contextlib.contextmanager
def self_attention_mask(model, mask: Callable) -> Iterator[None]:
    """Within the block, ``model``'s decoder builds its self-attention masks with ``mask`` (this
    instance only)."""
    model.decoder.self_attention_mask = mask
    try:
        yield
    finally:
        del model.decoder.self_attention_mask


class PastBuffer:
    """A self-attention buffer of nmt.cache.LayerCache (``self_k`` or ``self_v``) in the trace of
    the cached step. It holds the past keys in nmt's position-major layout (B, t, H, K);
    DecoderLayer's write of the step's keys at [:, start:end] appends them (a concatenation: t is a
    dynamic axis of the graph, where nmt's buffers are preallocated and written in place), and its
    read of [:, :end] gives positions 0..t, (B, t+1, H, K) (``index``: those slices, which the
    concatenation makes implicit)."""

    def __init__(self, past):
        self.value = past.transpose(1, 2)  # (B, H, t, K) -> (B, t, H, K)

    def __setitem__(self, index, new) -> None:
        import torch

        self.value = torch.cat([self.value, new], dim=1)  # (B, t, H, K) + (B, 1, H, K) -> (B, t+1, H, K)

    def __getitem__(self, index):
        return self.value  # (B, t+1, H, K)

    def present(self):
        return self.value.transpose(1, 2)  # (B, t+1, H, K) -> (B, H, t+1, K)


def encoder_graph(model, src_tokens):
    """encoder.onnx: src_tokens (B, S) -> memory (B, S, D), then cross_k_i (B, H, S, K) and
    cross_v_i (B, H, S, V) of each decoder layer, as nmt's decoding computes them once."""
    memory = model.encode(src_tokens)  # EncoderOut: (B, S, D), padding (B, S)
    cache = model.decoder.empty_cache(memory, capacity=1)  # its self-attention buffers are unused
    return (memory.out, *(kv for c in cache.layers for kv in (c.cross_k, c.cross_v)))


def decoder_graph(model, tgt_tokens, memory, src_tokens):
    """decoder.onnx: the teacher-forced decoder on BOS + the output so far (B, T) -> log_probs
    (B, W) of the next token."""
    import torch

    from ..cache import EncoderOut
    from ..vocab import PAD

    logits = model.decoder(tgt_tokens, EncoderOut(memory, src_tokens.eq(PAD)))  # (B, T, W)
    return torch.log_softmax(logits[:, -1].float(), dim=-1)  # (B, W)


def decoder_step_graph(model, tokens, position, src_padding_mask, *kv):
    """decoder_step.onnx: nmt's Decoder.run_layers on one token (B, 1) at ``position`` (a 0-dim
    tensor: the trace keeps it an input), with ``kv`` = cross_k_i, cross_v_i of every layer, then
    past_k_i (B, H, t, K), past_v_i (B, H, t, V) of every layer -> log_probs (B, W), then
    present_k_i (B, H, t+1, K), present_v_i (B, H, t+1, V) of every layer.

    Embedding slices the position table at ``position`` (a dynamic slice in the graph); a single
    query needs no self-attention mask (``one_query_mask``); DecoderLayer's test ``start > 0`` is
    traced at a position > 0, so the graph takes its path that reads the cache: at position 0 that
    is the empty past and the new key, the same as the path it leaves out."""
    import torch

    from ..cache import LayerCache

    n = len(model.decoder.layers)
    cross, past = kv[: 2 * n], kv[2 * n :]
    caches = [
        LayerCache(PastBuffer(past[2 * i]), PastBuffer(past[2 * i + 1]), cross[2 * i], cross[2 * i + 1])
        for i in range(n)
    ]
    memory_mask = ~src_padding_mask[:, None, None, :]  # (B, S) -> (B, 1, 1, S), True = attend
    x = model.decoder.run_layers(
        tokens,
        [(c.cross_k, c.cross_v) for c in caches],
        memory_mask=memory_mask,
        group=1,
        caches=caches,
        start=position,
    )  # (B, 1, D)
    log_probs = torch.log_softmax(model.decoder.output(x[:, -1]).float(), dim=-1)  # (B, W)
    return (log_probs, *(buf.present() for c in caches for buf in (c.self_k, c.self_v)))


def export_graph(
    model, graph: Callable, inputs: tuple, path: Path, *, names: dict, dynamic_axes: dict
) -> None:
    """torch.onnx.export of ``graph(model, *inputs)`` into ``path``, the model a submodule (its
    weights are the graph's initializers)."""
    import torch
    from torch import nn

    class Graph(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *args):
            return graph(self.model, *args)

    torch.onnx.export(
        Graph(),
        inputs,
        str(path),
        input_names=names["inputs"],
        output_names=names["outputs"],
        dynamic_axes=dynamic_axes,
        opset_version=OPSET,
        dynamo=False,
    )


def export_model(model, out_dir: Path) -> None:
    """encoder.onnx, decoder_step.onnx and decoder.onnx of ``model`` (an nmt Transformer, in eval
    mode) in out_dir."""
    import torch

    from ..vocab import BOS, EOS, PAD

    cfg, n = model.cfg, len(model.decoder.layers)
    names = graph_names(n)
    src = torch.tensor([[5, 6, 7, EOS], [8, 9, EOS, PAD]])  # (2, 4) example inputs: shapes only
    tgt = torch.tensor([[BOS, 5, 6], [BOS, 7, 8]])  # (2, 3)
    batch_src = {0: "batch", 1: "src_len"}
    cross_axes = {name: {0: "batch", 2: "src_len"} for name in layer_names("cross", n)}
    with torch.no_grad():
        memory, *cross = encoder_graph(model, src)  # (2, 4, D), (2, H, 4, K/V) per layer
        export_graph(
            model,
            encoder_graph,
            (src,),
            out_dir / "encoder.onnx",
            names=names["encoder"],
            dynamic_axes={"src_tokens": batch_src, "memory": batch_src} | cross_axes,
        )
        past = [torch.zeros(2, cfg.n_heads, 2, d) for _ in range(n) for d in (cfg.d_k, cfg.d_v)]  # t = 2
        with self_attention_mask(model, one_query_mask):
            export_graph(
                model,
                decoder_step_graph,
                (tgt[:, 2:], torch.tensor(2), src.eq(PAD), *cross, *past),  # position 2 > 0: see the graph
                out_dir / "decoder_step.onnx",
                names=names["decoder_step"],
                dynamic_axes={
                    "tokens": {0: "batch"},
                    "src_padding_mask": batch_src,
                    "log_probs": {0: "batch"},
                }
                | cross_axes
                | {name: {0: "batch", 2: "past_len"} for name in layer_names("past", n)}
                | {name: {0: "batch", 2: "present_len"} for name in layer_names("present", n)},
            )
        with self_attention_mask(model, traced_causal_mask):
            export_graph(
                model,
                decoder_graph,
                (tgt, memory, src),
                out_dir / "decoder.onnx",
                names=names["decoder"],
                dynamic_axes={
                    "tgt_tokens": {0: "batch", 1: "tgt_len"},
                    "memory": batch_src,
                    "src_tokens": batch_src,
                    "log_probs": {0: "batch"},
                },
            )


def write_metadata(tmp: Path, *, source: Path, cfg, out_dir: Path) -> None:
    """spm.model, nmt_export.json and README.md of the export of ``source`` (model ``cfg``) in tmp."""
    from ..checkpoint import read_config
    from ..vocab import BOS, EOS, PAD, UNK

    shutil.copyfile(source / "spm.model", tmp / "spm.model")
    data = read_config(source).get("data") or {}
    ids = {"pad": PAD, "unk": UNK, "bos": BOS, "eos": EOS}
    meta = {
        "source": str(source),
        "format": "onnx",
        "opset": OPSET,
        "ids": ids,
        "src_lang": data.get("src_lang"),
        "tgt_lang": data.get("tgt_lang"),
        "graphs": graph_names(cfg.decoder_layers),
        "model": dataclasses.asdict(cfg),
    }
    (tmp / "nmt_export.json").write_text(json.dumps(meta, indent=2) + "\n")
    shape = {"layers": cfg.decoder_layers, "heads": cfg.n_heads, "d_k": cfg.d_k, "d_v": cfg.d_v}
    readme = README.format(source=source, out=out_dir, **ids, **shape)
    (tmp / "README.md").write_text(readme, encoding="utf-8")


def export_onnx(checkpoint: str | Path, out_dir: str | Path) -> Path:
    """`nmt export onnx`: the checkpoint's encoder, cached decoder step and full-prefix decoder
    graphs, SentencePiece model and configuration in ``out_dir``, replaced atomically (new, empty,
    or an earlier export)."""
    import warnings

    from ..atomic import replace_dir
    from ..checkpoint import load_model, resolve_checkpoint

    try:
        import onnx  # noqa: F401  (torch.onnx.export needs it)
    except ImportError:
        raise ExportError(
            "onnx is not installed: pip install 'nmt[onnx]' (onnx==1.23.2, onnxruntime==1.32.0)"
        )
    source = resolve_checkpoint(checkpoint)
    out_dir = Path(out_dir)
    check_out_dir(source, out_dir)
    model, _ = load_model(source, device="cpu")
    check_left_to_right(model.cfg, "ONNX")
    check_full_attention(model.cfg, "this ONNX export")
    model.eval()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes on Python-level checks it keeps as constants
            export_model(model, tmp)
        write_metadata(tmp, source=source, cfg=model.cfg, out_dir=out_dir)
        replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def greedy(step: Callable, max_len: np.ndarray) -> np.ndarray:
    """nmt.infer.search's greedy rules on the next-token log-probabilities ``step(tgt)`` (B, W) of
    tgt (B, 1+t) = BOS + the output so far: PAD and BOS never chosen, EOS the last token a row may
    choose (its limit ``max_len`` (B,) tokens, EOS included); a finished row stays in the batch and
    is fed PAD. Returns tgt (B, 1+T), numpy int64."""
    import numpy as np

    from ..vocab import BOS, EOS, PAD

    tgt = np.full((len(max_len), 1), BOS, dtype=np.int64)  # (B, 1)
    done = np.zeros(len(max_len), dtype=bool)
    for t in range(1, int(max_len.max()) + 1):  # choosing token t (|Y| = t)
        log_probs = step(tgt)  # (B, W)
        log_probs[:, [PAD, BOS]] = -np.inf  # never generated (nmt.infer.search)
        best = log_probs.argmax(axis=-1)  # (B,)
        best[t >= max_len] = EOS  # the last allowed token is EOS
        best[done] = PAD
        done |= best == EOS
        tgt = np.concatenate([tgt, best[:, None]], axis=1)  # (B, t+1)
        if done.all():
            break
    return tgt


def open_session(path: Path, threads: int):
    """An ONNX Runtime CPU session of ``path`` on ``threads`` threads."""
    ort = import_onnxruntime()
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


@dataclasses.dataclass
class OnnxTranslator:
    """Greedy translation with the ONNX Runtime sessions of an `nmt export onnx` directory: the
    encoder and the cached decoder step (the full-prefix decoder, ``decoder``, opened on first use)."""

    encoder: object  # onnxruntime.InferenceSession
    decoder_step: object
    sp: object  # sentencepiece.SentencePieceProcessor
    model: ModelConfig  # nmt_export.json's "model"
    directory: Path
    threads: int = 1

    @classmethod
    def load(cls, directory: str | Path, *, threads: int = 1) -> "OnnxTranslator":
        from ..config import ModelConfig
        from ..vocab import load_spm

        import_onnxruntime()
        directory = Path(directory)
        meta_file = directory / "nmt_export.json"
        for name in ("encoder.onnx", "decoder_step.onnx", "nmt_export.json"):
            if not (directory / name).is_file():
                raise ExportError(f"{directory}: not an `nmt export onnx` directory of this nmt (no {name})")
        meta = json.loads(meta_file.read_text())
        return cls(
            open_session(directory / "encoder.onnx", threads),
            open_session(directory / "decoder_step.onnx", threads),
            load_spm(directory),
            ModelConfig(**meta["model"]),
            directory,
            threads,
        )

    @functools.cached_property
    def decoder(self):
        """The full-prefix decoder's session (decoder.onnx)."""
        return open_session(self.directory / "decoder.onnx", self.threads)

    @property
    def max_positions(self) -> int:
        return self.model.max_positions

    def cached_steps(self, src) -> Callable:
        """``step(tgt)`` for ``greedy`` with the cached step on src (B, S): the encoder runs once
        here; each call feeds tgt's last token at its position and keeps the presents as the next
        call's past (each call must extend the previous call's tgt by one token)."""
        import numpy as np

        from ..vocab import PAD

        n, cfg = self.model.decoder_layers, self.model
        _memory, *cross = self.encoder.run(None, {"src_tokens": src})  # (B, S, D), (B, H, S, K/V) per layer
        fixed = {"src_padding_mask": src == PAD, **dict(zip(layer_names("cross", n), cross))}
        empty = {"k": (len(src), cfg.n_heads, 0, cfg.d_k), "v": (len(src), cfg.n_heads, 0, cfg.d_v)}  # t = 0
        past = {
            name: np.zeros(empty[name.split("_")[1]], dtype=np.float32) for name in layer_names("past", n)
        }

        def step(tgt):
            position = np.array(tgt.shape[1] - 1, dtype=np.int64)  # () the last token's position, = t
            feeds = {"tokens": tgt[:, -1:], "position": position, **fixed, **past}  # tokens (B, 1)
            log_probs, *present = self.decoder_step.run(None, feeds)  # (B, W), (B, H, t+1, K/V) per layer
            past.update(zip(layer_names("past", n), present))
            return log_probs

        return step

    def prefix_steps(self, src) -> Callable:
        """``step(tgt)`` for ``greedy`` with the full-prefix decoder on src (B, S): tgt is read whole
        at every call."""
        memory = self.encoder.run(["memory"], {"src_tokens": src})[0]  # (B, S, D)
        return lambda tgt: self.decoder.run(None, {"tgt_tokens": tgt, "memory": memory, "src_tokens": src})[0]

    def translate(
        self, sentences: list[str], *, max_len_a: float = 1.0, max_len_b: int = 50, cached: bool = True
    ) -> list[str]:
        """Each sentence's greedy translation: cleaned and encoded as nmt translate does (pieces +
        EOS, cut to the model's positions), one batch; an empty sentence gives ''. ``cached``:
        with the cached step (decoder_step.onnx), else the full-prefix decoder (decoder.onnx)."""
        import numpy as np

        from ..data.lines import clean_line
        from ..infer.text import add_eos
        from ..vocab import EOS, PAD

        cleaned = [clean_line(s) for s in sentences]
        rows = [i for i, s in enumerate(cleaned) if s]
        out = [""] * len(sentences)
        if not rows:
            return out
        sources = [add_eos(ids, self.max_positions)[0] for ids in self.sp.encode([cleaned[i] for i in rows])]
        src = np.full((len(rows), max(map(len, sources))), PAD, dtype=np.int64)  # (B, S)
        for r, ids in enumerate(sources):
            src[r, : len(ids)] = ids
        # |Y| <= floor(a * |x| + b), at most the model's positions, at least 1 (nmt.infer.search)
        max_len = np.array(
            [max(1, min(math.floor(max_len_a * len(ids) + max_len_b), self.max_positions)) for ids in sources]
        )
        tgt = greedy(self.cached_steps(src) if cached else self.prefix_steps(src), max_len)  # (B, 1+T)
        for r, i in enumerate(rows):
            ids = [int(x) for x in tgt[r, 1:]]
            ids = ids[: ids.index(EOS)] if EOS in ids else ids
            out[i] = self.sp.decode(ids).replace("\r", " ").replace("\n", " ")
        return out
