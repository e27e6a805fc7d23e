"""`nmt export onnx`: an nmt checkpoint as two ONNX graphs, and greedy translation with ONNX Runtime.

The directory holds
  * ``encoder.onnx``: src_tokens (B, S) int64, padded with PAD -> memory (B, S, D) float32;
  * ``decoder.onnx``: tgt_tokens (B, T) int64 (BOS + the output so far), memory (B, S, D),
    src_tokens (B, S) -> log_probs (B, W): log-softmax of the next token after the last position.
    The decoder is run on the whole prefix at every step (no key/value cache: O(T^2) per sentence,
    a route into ONNX Runtime rather than its fastest form);
  * ``spm.model``, ``nmt_export.json`` (nmt's model configuration, the token ids, the languages) and
    a ``README.md``.
Both graphs come from ``torch.onnx.export`` (the TorchScript exporter, opset 17) of the model's own
``encode`` and teacher-forced ``decoder``, with every batch and length axis dynamic; the decoder's
causal mask is built as a tensor of the traced length (nmt's SDPA flag ``is_causal`` is a Python
bool the trace would freeze). ``OnnxTranslator`` translates greedily with the two sessions, by the
rules of nmt.infer.search (PAD and BOS never generated, at most a*|x|+b tokens, EOS included).
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import tempfile
from pathlib import Path

from .export_ctranslate2 import ExportError, check_full_attention, check_left_to_right, check_out_dir

OPSET = 17

README = """# ONNX export of an nmt checkpoint

Written by `nmt export onnx` from {source}. `encoder.onnx`: src_tokens (B, S) int64 -> memory
(B, S, D); `decoder.onnx`: tgt_tokens (B, T), memory, src_tokens -> log_probs (B, W) of the next
token (the whole prefix is fed at every step). Ids: PAD {pad}, UNK {unk}, BOS {bos}, EOS {eos};
each source sentence is its SentencePiece pieces (`spm.model`) + EOS.

    from nmt.infer.export_onnx import OnnxTranslator
    OnnxTranslator.load("{out}").translate(["..."])   # greedy, with onnxruntime
"""


def import_onnxruntime():
    try:
        import onnxruntime
    except ImportError:
        raise ExportError(
            "onnxruntime is not installed: pip install 'nmt[onnx]' (onnx==1.23.2, onnxruntime==1.32.0)"
        ) from None
    return onnxruntime


def traced_causal_mask(t, start: int, device) -> tuple:
    """Decoder.self_attention_mask for the trace: query i sees keys 0..i, a (T, T) tensor of the
    traced length T (start is 0: the whole prefix is fed)."""
    import torch

    return torch.ones(t, t, dtype=torch.bool, device=device).tril(), False  # (T, T) True = attend


def export_model(model, out_dir: Path) -> None:
    """encoder.onnx and decoder.onnx of ``model`` (an nmt Transformer, in eval mode) in out_dir."""
    import torch
    from torch import nn

    from ..cache import EncoderOut
    from ..vocab import BOS, EOS, PAD

    class Encoder(nn.Module):  # the model a submodule: its weights are the graph's initializers
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, src_tokens):
            return self.model.encode(src_tokens).out  # (B, S, D)

    class Decoder(Encoder):
        def forward(self, tgt_tokens, memory, src_tokens):
            logits = self.model.decoder(tgt_tokens, EncoderOut(memory, src_tokens.eq(PAD)))  # (B, T, W)
            return torch.log_softmax(logits[:, -1].float(), dim=-1)  # (B, W)

    src = torch.tensor([[5, 6, 7, EOS], [8, 9, EOS, PAD]])  # (2, 4) example inputs: shapes only
    tgt = torch.tensor([[BOS, 5, 6], [BOS, 7, 8]])  # (2, 3)
    batch_src = {0: "batch", 1: "src_len"}
    model.decoder.self_attention_mask = traced_causal_mask  # this instance only
    try:
        with torch.no_grad():
            memory = model.encode(src).out
            torch.onnx.export(
                Encoder(),
                (src,),
                str(out_dir / "encoder.onnx"),
                input_names=["src_tokens"],
                output_names=["memory"],
                dynamic_axes={"src_tokens": batch_src, "memory": batch_src},
                opset_version=OPSET,
                dynamo=False,
            )
            torch.onnx.export(
                Decoder(),
                (tgt, memory, src),
                str(out_dir / "decoder.onnx"),
                input_names=["tgt_tokens", "memory", "src_tokens"],
                output_names=["log_probs"],
                dynamic_axes={
                    "tgt_tokens": {0: "batch", 1: "tgt_len"},
                    "memory": batch_src,
                    "src_tokens": batch_src,
                    "log_probs": {0: "batch"},
                },
                opset_version=OPSET,
                dynamo=False,
            )
    finally:
        del model.decoder.self_attention_mask


def export_onnx(checkpoint: str | Path, out_dir: str | Path) -> Path:
    """`nmt export onnx`: the checkpoint's encoder and decoder graphs, SentencePiece model and
    configuration in ``out_dir``, replaced atomically (new, empty, or an earlier export)."""
    import warnings

    from ..atomic import replace_dir
    from ..checkpoint import load_model, read_config, resolve_checkpoint
    from ..vocab import BOS, EOS, PAD, UNK

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
        shutil.copyfile(source / "spm.model", tmp / "spm.model")
        data = read_config(source).get("data") or {}
        meta = {
            "source": str(source),
            "format": "onnx",
            "opset": OPSET,
            "ids": {"pad": PAD, "unk": UNK, "bos": BOS, "eos": EOS},
            "src_lang": data.get("src_lang"),
            "tgt_lang": data.get("tgt_lang"),
            "model": dataclasses.asdict(model.cfg),
        }
        (tmp / "nmt_export.json").write_text(json.dumps(meta, indent=2) + "\n")
        readme = README.format(source=source, pad=PAD, unk=UNK, bos=BOS, eos=EOS, out=out_dir)
        (tmp / "README.md").write_text(readme, encoding="utf-8")
        replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


@dataclasses.dataclass
class OnnxTranslator:
    """Greedy translation with the two ONNX Runtime sessions of an `nmt export onnx` directory."""

    encoder: object  # onnxruntime.InferenceSession
    decoder: object
    sp: object  # sentencepiece.SentencePieceProcessor
    max_positions: int

    @classmethod
    def load(cls, directory: str | Path, *, threads: int = 1) -> "OnnxTranslator":
        from ..vocab import load_spm

        ort = import_onnxruntime()
        directory = Path(directory)
        meta_file = directory / "nmt_export.json"
        if not (directory / "decoder.onnx").is_file() or not meta_file.is_file():
            raise ExportError(f"{directory}: not an `nmt export onnx` directory (no decoder.onnx)")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1

        def session(name: str):
            return ort.InferenceSession(str(directory / name), options, providers=["CPUExecutionProvider"])

        meta = json.loads(meta_file.read_text())
        return cls(
            session("encoder.onnx"),
            session("decoder.onnx"),
            load_spm(directory),
            meta["model"]["max_positions"],
        )

    def translate(self, sentences: list[str], *, max_len_a: float = 1.0, max_len_b: int = 50) -> list[str]:
        """Each sentence's greedy translation: cleaned and encoded as nmt translate does (pieces +
        EOS, cut to the model's positions), one batch; an empty sentence gives ''."""
        import numpy as np

        from ..data.lines import clean_line
        from ..vocab import BOS, EOS, PAD
        from .text import add_eos

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
        limit = [
            max(1, min(math.floor(max_len_a * len(ids) + max_len_b), self.max_positions)) for ids in sources
        ]
        max_len = np.array(limit)
        memory = self.encoder.run(None, {"src_tokens": src})[0]  # (B, S, D)
        tgt = np.full((len(rows), 1), BOS, dtype=np.int64)  # (B, 1)
        done = np.zeros(len(rows), dtype=bool)
        for t in range(1, int(max_len.max()) + 1):  # choosing token t (|Y| = t)
            log_probs = self.decoder.run(None, {"tgt_tokens": tgt, "memory": memory, "src_tokens": src})[0]
            log_probs[:, [PAD, BOS]] = -np.inf  # never generated (nmt.infer.search)
            best = log_probs.argmax(axis=-1)  # (B,)
            best[t >= max_len] = EOS  # the last allowed token is EOS
            best[done] = PAD
            done |= best == EOS
            tgt = np.concatenate([tgt, best[:, None]], axis=1)  # (B, t+1)
            if done.all():
                break
        for r, i in enumerate(rows):
            ids = [int(x) for x in tgt[r, 1:]]
            ids = ids[: ids.index(EOS)] if EOS in ids else ids
            out[i] = self.sp.decode(ids).replace("\r", " ").replace("\n", " ")
        return out
