"""Encoding cleaned text into the id files of a prepared directory (`nmt prepare`, step 4).

A split `{prefix}` is written as `{prefix}.{src,tgt}.bin` (all piece ids back to back, raw
little-endian `dtype`) and `{prefix}.{src,tgt}.offsets.npy` (int64 [n + 1]). `binarize` encodes
with the usual (deterministic) BPE segmentation and filters train by length; `binarize_samples`
writes BPE-dropout segmentations (Provilkov et al., 2020) of the pairs that filter kept.
Input is read `CHUNK` lines at a time: memory does not grow with the corpus.
"""

from __future__ import annotations

import hashlib
import itertools
from array import array
from collections.abc import Iterator
from pathlib import Path

import numpy as np

CHUNK = 10_000  # lines per encode call

__all__ = ["CHUNK", "binarize", "binarize_samples", "text_chunks", "write_offsets"]


def text_chunks(files: tuple[Path, Path]) -> Iterator[tuple[list[str], list[str]]]:
    """The aligned lines of two text files (newlines removed), `CHUNK` pairs at a time."""
    with (
        open(files[0], encoding="utf-8", newline="\n") as fs,
        open(files[1], encoding="utf-8", newline="\n") as ft,
    ):
        while True:
            src = [line[:-1] for line in itertools.islice(fs, CHUNK)]
            tgt = [line[:-1] for line in itertools.islice(ft, CHUNK)]
            if not src:
                return
            yield src, tgt


def _write_ids(f, ids: list[list[int]], dtype: np.dtype) -> list[int]:
    """Append the ids of a chunk's examples to `f`; return their lengths."""
    lens = [len(x) for x in ids]
    f.write(np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=sum(lens)).tobytes())
    return lens


def binarize(
    sp,
    files: tuple[Path, Path],
    prefix: Path,
    *,
    dtype: np.dtype,
    limits: tuple[int, float] | None,
    threads: int,
    warn_len: int | None = None,
) -> dict:
    """Encode cleaned text to `{prefix}.{src,tgt}.bin` + offsets; filter by `limits` (max_len,
    max_ratio) if given; count the pairs (kept) with a side longer than `warn_len`.

    Returns the counts (`pairs`, `src_tokens`, `tgt_tokens`, `dropped`, `longer`) and `keep`: a
    bool array with one entry per input pair (written or dropped by `limits`), None without them.
    """
    lengths = {"src": array("q"), "tgt": array("q")}  # 8 bytes per example and side
    dropped = {"too_long": 0, "ratio": 0}
    longer = 0
    keep = array("b")  # 1 per input pair: kept (written) or dropped by `limits`
    with open(f"{prefix}.src.bin", "wb") as fs, open(f"{prefix}.tgt.bin", "wb") as ft:
        for src_text, tgt_text in text_chunks(files):
            src_ids = sp.encode(src_text, out_type=int, num_threads=threads)
            tgt_ids = sp.encode(tgt_text, out_type=int, num_threads=threads)
            if limits:
                max_len, max_ratio = limits
                keep_s, keep_t = [], []
                for s, t in zip(src_ids, tgt_ids):
                    ls, lt = len(s), len(t)
                    if max(ls, lt) > max_len:
                        dropped["too_long"] += 1
                        keep.append(0)
                    elif max(ls, lt) > max_ratio * max(1, min(ls, lt)):
                        dropped["ratio"] += 1
                        keep.append(0)
                    else:
                        keep_s.append(s)
                        keep_t.append(t)
                        keep.append(1)
                src_ids, tgt_ids = keep_s, keep_t
            elif warn_len is not None:
                longer += sum(max(len(s), len(t)) > warn_len for s, t in zip(src_ids, tgt_ids))
            lengths["src"].extend(_write_ids(fs, src_ids, dtype))
            lengths["tgt"].extend(_write_ids(ft, tgt_ids, dtype))
    counts = {
        "pairs": len(lengths["src"]),
        "dropped": dropped,
        "longer": longer,
        "keep": np.frombuffer(keep, dtype=np.int8).astype(bool) if keep else None,
    }
    counts.update(write_offsets(prefix, lengths))
    return counts


def write_offsets(prefix: Path, lengths: dict) -> dict:
    """Write `{prefix}.{side}.offsets.npy` from per-example lengths; return the token counts."""
    counts = {}
    for side, lens in lengths.items():
        offsets = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(np.frombuffer(lens, dtype=np.int64), out=offsets[1:])
        np.save(f"{prefix}.{side}.offsets.npy", offsets)
        counts[f"{side}_tokens"] = int(offsets[-1])
    return counts


def binarize_samples(
    sp,
    files: tuple[Path, Path],
    out: Path,
    *,
    keep: np.ndarray,
    p: float,
    copies: int,
    seed: int,
    max_len: int,
    dtype: np.dtype,
) -> dict:
    """BPE-dropout: write `train.bpe{k}` for k = 1..`copies` into `out`, each a sampled
    segmentation of the train pairs `keep` selects (the pairs and order of `train`), every merge
    skipped with probability `p`. A side whose sample is longer than `max_len` keeps its usual
    segmentation (so the model's positions still hold every example).

    Deterministic: every encode call (copy k, chunk c, side) gets its own seed derived from
    (`seed`, k, c, side) and runs on one thread (SentencePiece's multi-threaded sampling depends
    on the scheduling; each call restarts its generator from the seed last set)."""
    import sentencepiece as spm

    names, src_tokens, tgt_tokens = [], [], []
    for k in range(1, copies + 1):
        name = f"train.bpe{k}"
        lengths = {"src": array("q"), "tgt": array("q")}
        start = 0
        with open(out / f"{name}.src.bin", "wb") as fs, open(out / f"{name}.tgt.bin", "wb") as ft:
            for chunk, (src_text, tgt_text) in enumerate(text_chunks(files)):
                chunk_keep = keep[start : start + len(src_text)]
                start += len(src_text)
                for side, text, f in (("src", src_text, fs), ("tgt", tgt_text, ft)):
                    text = [t for t, kept in zip(text, chunk_keep) if kept]
                    digest = hashlib.sha256(f"{seed}/{k}/{chunk}/{side}".encode()).digest()
                    # 0xFFFFFFFF would mean "unseeded" to SentencePiece
                    spm.set_random_generator_seed(int.from_bytes(digest[:4], "little") % 0xFFFFFFFF)
                    ids = sp.encode(
                        text, out_type=int, enable_sampling=True, alpha=p, nbest_size=-1, num_threads=1
                    )
                    ids = [x if len(x) <= max_len else sp.encode(t, out_type=int) for x, t in zip(ids, text)]
                    lengths[side].extend(_write_ids(f, ids, dtype))
        counts = write_offsets(out / name, lengths)
        names.append(name)
        src_tokens.append(counts["src_tokens"])
        tgt_tokens.append(counts["tgt_tokens"])
    return {
        "bpe_dropout": p,
        "splits": names,
        "pairs": int(keep.sum()),
        "src_tokens": src_tokens,
        "tgt_tokens": tgt_tokens,
    }
