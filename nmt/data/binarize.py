"""Encoding cleaned text into the id files of a prepared directory (`nmt prepare`, step 4).

A split `{prefix}` is written as `{prefix}.{src,tgt}.bin` (all piece ids back to back, raw
little-endian `dtype`) and `{prefix}.{src,tgt}.offsets.npy` (int64 [n + 1]). `binarize` encodes
with the usual (deterministic) BPE segmentation and filters train by length; `binarize_samples`
writes BPE-dropout segmentations (Provilkov et al., 2020) of the pairs that filter kept.
Input is read `CHUNK` lines at a time: memory does not grow with the corpus.
"""

from __future__ import annotations

import heapq
import itertools
import random
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nmt.data.download import DataError

CHUNK = 10_000  # lines per encode call

__all__ = [
    "BPEDropout",
    "CHUNK",
    "binarize",
    "binarize_samples",
    "bpe_dropout",
    "bpe_merges",
    "text_chunks",
    "write_offsets",
]


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
    tgt_sp=None,
) -> dict:
    """Encode cleaned text to `{prefix}.{src,tgt}.bin` + offsets (the target side with `tgt_sp`, its
    own SentencePiece model on the same ids; None: `sp`); filter by `limits` (max_len, max_ratio)
    if given; count the pairs (kept) with a side longer than `warn_len`.

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
            tgt_ids = (sp if tgt_sp is None else tgt_sp).encode(tgt_text, out_type=int, num_threads=threads)
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


def bpe_merges(sp) -> dict[str, tuple[float, int]]:
    """The pieces a BPE merge can make: piece -> (score, id), the normal pieces of `sp` (control,
    unknown, unused and byte pieces never come from a merge)."""
    special = (sp.is_control, sp.is_unknown, sp.is_unused, sp.is_byte)
    return {
        sp.id_to_piece(i): (sp.get_score(i), i)
        for i in range(sp.get_piece_size())
        if not any(f(i) for f in special)
    }


def bpe_dropout(sp, merges: dict[str, tuple[float, int]], text: str, *, p: float, rng: random.Random) -> list:
    """The ids of one BPE-dropout segmentation of `text`: SentencePiece's BPE encoding (the pair
    of adjacent symbols with the best score merges first, the leftmost among equals), each
    merge skipped with probability `p`, a skipped pair dropped for good (Provilkov et al., 2020).

    Ours rather than `sp.encode(enable_sampling=True)`: sentencepiece >= 0.2.3 draws from an
    absl::BitGen, which salts its seed per process, so `set_random_generator_seed` repeats a
    sample only within one process. With `p` = 0 this is `sp.encode(text)` (checked on the
    first chunk by `binarize_samples`)."""
    pieces = list(sp.normalize(text))  # one symbol per character
    n = len(pieces)
    prev, nxt = list(range(-1, n - 1)), [*range(1, n), -1]
    agenda = []  # heap of (-score, left, right, length of the merged piece)

    def push(left: int, right: int):
        if left >= 0 and right >= 0 and (merged := merges.get(pieces[left] + pieces[right])):
            heapq.heappush(agenda, (-merged[0], left, right, len(pieces[left]) + len(pieces[right])))

    for i in range(1, n):
        push(i - 1, i)
    while agenda:
        _, left, right, size = heapq.heappop(agenda)
        if not pieces[left] or not pieces[right] or len(pieces[left]) + len(pieces[right]) != size:
            continue  # stale: a symbol of the pair merged since
        if p > 0 and rng.random() < p:
            continue  # dropped
        pieces[left] += pieces[right]
        pieces[right] = ""
        nxt[left] = nxt[right]
        if nxt[right] >= 0:
            prev[nxt[right]] = left
        push(prev[left], left)
        push(left, nxt[left])
    unk, ids = sp.unk_id(), []
    for piece in filter(None, pieces):
        i = merges.get(piece, (0.0, unk))[1]
        if not (i == unk and ids and ids[-1] == unk):  # SentencePiece joins unknown neighbours
            ids.append(i)
    return ids


def _check_bpe(sp, merges: dict, texts: list[str]):
    """Refuse a model whose encoding `bpe_dropout` does not reproduce (not BPE, or with pieces
    it does not model, such as user-defined symbols); a byte-fallback model at once, since it
    differs only on a text with unknown characters, which ``texts`` may not hold."""
    if any(sp.is_byte(i) for i in range(sp.get_piece_size())):
        raise DataError(
            "--bpe-dropout: the SentencePiece model has byte-fallback pieces, which BPE-dropout "
            "does not sample (it needs a BPE model without byte fallback or user-defined symbols)"
        )
    for t in texts:
        if bpe_dropout(sp, merges, t, p=0.0, rng=random.Random(0)) != sp.encode(t, out_type=int):
            raise DataError(
                f"--bpe-dropout: the SentencePiece model does not encode {t!r} as BPE merges do "
                "(BPE-dropout needs a BPE model without user-defined symbols)"
            )


@dataclass(frozen=True)
class BPEDropout:
    """BPE-dropout's sampling: ``copies`` segmentations, every merge skipped with probability
    ``p``, each (copy k, side) drawing from its own generator seeded from (``seed``, k, side)."""

    p: float
    copies: int
    seed: int


def binarize_samples(
    sp,
    files: tuple[Path, Path],
    out: Path,
    dropout: BPEDropout,
    *,
    keep: np.ndarray,
    max_len: int,
    dtype: np.dtype,
    tgt_sp=None,
) -> dict:
    """BPE-dropout: write `train.bpe{k}` for k = 1..`dropout.copies` into `out`, each a sampled
    segmentation of the train pairs `keep` selects (the pairs and order of `train`), every merge
    skipped with probability `dropout.p` (the target side's merges those of `tgt_sp` where it has
    its own model; None: `sp`). A side whose sample is longer than `max_len` keeps its usual
    segmentation (so the model's positions still hold every example).

    Deterministic, the same bytes in every process: each (copy k, side) draws from its own
    generator seeded from (`dropout.seed`, k, side) (see `bpe_dropout`)."""
    p, copies, seed = dropout.p, dropout.copies, dropout.seed
    models = {"src": sp, "tgt": sp if tgt_sp is None else tgt_sp}
    merges = {side: bpe_merges(m) for side, m in models.items()}
    names, src_tokens, tgt_tokens = [], [], []
    for k in range(1, copies + 1):
        name = f"train.bpe{k}"
        lengths = {"src": array("q"), "tgt": array("q")}
        start = 0
        rngs = {side: random.Random(f"{seed}/{k}/{side}") for side in ("src", "tgt")}
        with open(out / f"{name}.src.bin", "wb") as fs, open(out / f"{name}.tgt.bin", "wb") as ft:
            for chunk, (src_text, tgt_text) in enumerate(text_chunks(files)):
                chunk_keep = keep[start : start + len(src_text)]
                start += len(src_text)
                for side, text, f in (("src", src_text, fs), ("tgt", tgt_text, ft)):
                    text = [t for t, kept in zip(text, chunk_keep) if kept]
                    m = models[side]
                    if k == 1 and chunk == 0:
                        _check_bpe(m, merges[side], text)
                    ids = [bpe_dropout(m, merges[side], t, p=p, rng=rngs[side]) for t in text]
                    ids = [x if len(x) <= max_len else m.encode(t, out_type=int) for x, t in zip(ids, text)]
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
