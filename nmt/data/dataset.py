"""A prepared data directory read back: its meta.json (`load_meta`) and each binarized split as a
memory-mapped dataset (`ParallelDataset`, what training reads), sizes checked against each other.

`nmt prepare` (nmt.data.prepare) writes the directory:

    meta.json                 languages, vocab size, dtype, counts, cleaning report, input sha256,
                              the recipe (all prepare options)
    spm.model, spm.vocab      SentencePiece model; ids pad=0 unk=1 bos=2 eos=3
    target_spm.model          the target side's own SentencePiece model on the same ids, where the
                              reused --spm-model (a checkpoint) has one; it encoded the tgt side
    {split}.{side}.bin        side in {src, tgt}: all token ids of the split back to back, raw
                              little-endian `meta["dtype"]` (uint16 if the vocab fits, else int32),
                              pieces only (no BOS/EOS)
    {split}.{side}.offsets.npy  int64 [n + 1]: ids of example i are bin[offsets[i]:offsets[i+1]]
    {split}.{lang}.txt        valid/test only: the cleaned text, line-aligned (BLEU references)
    train.bpe{k}.{side}.*     with --bpe-dropout: k = 1..K sampled segmentations of the train
                              pairs (same pairs, same order; meta["train_samples"])
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..vocab import check_special_ids
from .download import DataError


def load_meta(data_dir: str | Path) -> dict:
    path = Path(data_dir) / "meta.json"
    if not path.is_file():
        raise DataError(
            f"{data_dir} is not a prepared data directory (no meta.json); run `nmt prepare` first"
        )
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:  # cut or altered: not UTF-8, not JSON
        raise DataError(f"{path}: not a readable meta.json ({e}); prepare the data again") from None
    if not isinstance(meta, dict):
        raise DataError(f"{path}: not the meta.json of `nmt prepare` (altered); prepare the data again")
    try:  # the ids the data was written with must be nmt.vocab's (the one source of special ids)
        check_special_ids(meta.get("special_ids"), str(path))
    except ValueError as e:
        raise DataError(str(e)) from None
    return meta


def _load_offsets(path: Path) -> np.ndarray:
    """An offsets file of a prepared split; DataError naming it if it is cut or altered."""
    try:
        return np.load(path)
    except (ValueError, EOFError) as e:  # numpy: not an .npy, a cut header or body
        raise DataError(f"{path}: not a readable offsets file ({e}); prepare the data again") from None


class ParallelDataset:
    """One binarized split, memory-mapped. Item i is (src_ids, tgt_ids): int64 arrays of pieces,
    without EOS/BOS (collate adds them). Pickles without its maps (safe for DataLoader workers).
    """

    def __init__(self, data_dir: str | Path, split: str, meta: dict):
        self.data_dir, self.split, self.meta = Path(data_dir), split, meta
        prefix = self.data_dir / split
        self._offsets = {side: _load_offsets(Path(f"{prefix}.{side}.offsets.npy")) for side in ("src", "tgt")}
        self._check_sizes()
        self.src_lengths = np.diff(self._offsets["src"])  # int64 [n]
        self.tgt_lengths = np.diff(self._offsets["tgt"])  # int64 [n]
        self._maps: dict | None = None

    def _check_sizes(self) -> None:
        """Each side's offsets start at 0, never decrease, count the same pairs, and end at the size
        of its .bin file: a truncated or altered data folder is an error, not short examples."""
        itemsize = np.dtype(self.meta["dtype"]).itemsize
        for side, offsets in self._offsets.items():
            name = self.data_dir / f"{self.split}.{side}.offsets.npy"
            if offsets.ndim != 1 or len(offsets) < 1 or offsets[0] != 0 or np.any(np.diff(offsets) < 0):
                raise DataError(
                    f"{name}: not the offsets of a prepared split (altered or damaged); "
                    "prepare the data again"
                )
            if len(offsets) != len(self._offsets["src"]):
                raise DataError(
                    f"{name}: {len(offsets) - 1} pairs, but {self.split}.src.offsets.npy has "
                    f"{len(self._offsets['src']) - 1}; prepare the data again"
                )
            path = self.data_dir / f"{self.split}.{side}.bin"
            size, expected = path.stat().st_size, int(offsets[-1]) * itemsize
            if size != expected:
                raise DataError(
                    f"{path}: {size} bytes, but {name.name} ends at piece {int(offsets[-1])} "
                    f"({expected} bytes of {self.meta['dtype']}): the data folder is truncated or "
                    "altered; prepare it again"
                )

    @classmethod
    def load(cls, data_dir: str | Path, split: str) -> "ParallelDataset":
        meta = load_meta(data_dir)
        if split not in meta["splits"]:
            raise DataError(f"{data_dir} has no split {split!r} (has {sorted(meta['splits'])})")
        return cls(data_dir, split, meta)

    def _ids(self, side: str) -> np.ndarray:
        if self._maps is None:
            dtype = np.dtype(self.meta["dtype"])
            self._maps = {}
            for s in ("src", "tgt"):
                path = self.data_dir / f"{self.split}.{s}.bin"
                empty = path.stat().st_size == 0  # np.memmap refuses empty files
                self._maps[s] = np.zeros(0, dtype) if empty else np.memmap(path, dtype=dtype, mode="r")
        return self._maps[side]

    def __len__(self) -> int:
        return len(self.src_lengths)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        out = []
        for side in ("src", "tgt"):
            o = self._offsets[side]
            out.append(np.asarray(self._ids(side)[o[i] : o[i + 1]], dtype=np.int64))
        return out[0], out[1]

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_maps": None}
