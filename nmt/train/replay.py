"""Replay while fine-tuning: general data trained on beside the user's, so that adapting to a new
domain does not forget the old one (`nmt train DATA --init CKPT --replay GENERAL --replay-share S`;
mixing in the original data is the classic remedy, e.g. Chu et al. 2017's "mixed fine-tuning").

Each epoch of the user's train pairs is joined by pairs drawn from GENERAL's train split (without
repeats until every one has been drawn) until they hold the share S of the epoch's target tokens
(S / (1 - S) times the user's, to within one pair); a new draw every epoch, seeded by the run's seed
and the epoch.
The joined pairs are batched together as `TokenBatchSampler` batches one corpus (by length, the
batch order shuffled), so any stretch of updates holds about the share S of general tokens. The
epoch, its draw and its batches all follow from (seed, epoch): the sampler's state is (epoch,
position), saved and restored as any run's, and a resumed run replays what the uninterrupted one
would have. GENERAL must have DATA's vocabulary, id for id.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import ConfigError
from ..data.batching import EpochBatches, TokenBatchSampler
from ..data.dataset import ParallelDataset, load_meta
from .finetune import vocabulary_difference


class ReplayError(ConfigError):
    """A --replay directory or share that cannot serve this run."""


@dataclass(frozen=True)
class Replay:
    """General data to replay (``directory``'s train split) and its share of the target tokens."""

    directory: Path
    share: float

    def record(self) -> dict:
        """config.json's "replay"."""
        return {"path": str(self.directory.resolve()), "share": self.share}


def open_replay(path: str | Path, share: float, *, data_dir: str | Path) -> Replay:
    """A prepared directory to replay beside ``data_dir``: a train split, the same vocabulary."""
    if not 0.0 < share < 1.0:
        raise ReplayError(f"--replay-share {share}: must be in (0, 1), the share of the target tokens")
    directory = Path(path)
    meta = load_meta(directory)
    if "train" not in meta.get("splits", {}) or not meta["splits"]["train"].get("pairs"):
        raise ReplayError(f"--replay {directory}: no train pairs to replay")
    try:
        difference = vocabulary_difference(directory, data_dir)
    except ValueError as e:
        raise ReplayError(f"--replay {directory}: {e}") from None
    if difference:
        raise ReplayError(
            f"--replay {directory}: {difference}; replayed data must have the run's vocabulary "
            f"(prepare it with --spm-model {data_dir})"
        )
    return Replay(directory, share)


def replay_tokens(share: float, user_tgt_lengths: np.ndarray) -> int:
    """The general target tokens (with EOS) an epoch draws: share / (1 - share) times the user's."""
    return max(1, round(share / (1.0 - share) * float(np.sum(user_tgt_lengths + 1))))


def draw(rng: np.random.Generator, tgt_lengths: np.ndarray, tokens: int) -> np.ndarray:
    """Indices of pairs in a random order until their target tokens (with EOS) reach ``tokens``:
    a permutation's prefix, then the next permutation's when one is not enough."""
    sizes = tgt_lengths + 1
    parts, need = [], tokens
    while need > 0:
        order = rng.permutation(len(sizes))  # (N,)
        total = np.cumsum(sizes[order])  # (N,)
        k = min(int(np.searchsorted(total, need)) + 1, len(order))  # the first prefix reaching need
        parts.append(order[:k])
        need -= int(total[k - 1])
    return np.concatenate(parts)


class ReplaySampler(EpochBatches):
    """A resumable sampler (nmt.data.batching.EpochBatches, as TokenBatchSampler) over each
    epoch's user pairs (indices 0 .. n-1; with BPE-dropout copies, row epoch mod K of the lengths)
    and the general pairs drawn for it (indices n .. n+m-1, `locate`)."""

    def __init__(
        self,
        *,
        user: tuple[np.ndarray, np.ndarray],
        general: tuple[np.ndarray, np.ndarray],
        share: float,
        max_tokens: int,
        seed: int = 0,
        replicas: tuple[int, int] = (1, 0),
    ):
        """``user``, ``general``: (source, target) lengths in pieces, [n] or [K, n] for the user's,
        [N] for the general; ``replicas``: (num_replicas, rank)."""
        self.user_src, self.user_tgt = (np.atleast_2d(np.asarray(x, dtype=np.int64)) for x in user)
        self.general_src, self.general_tgt = (np.asarray(x, dtype=np.int64) for x in general)
        self.n_user = self.user_src.shape[1]
        self.tokens = replay_tokens(share, self.user_tgt[0])
        self.max_tokens, self.seed, self.replicas = max_tokens, seed, replicas
        self.epoch, self.position = 0, 0
        self._cache: tuple[int, np.ndarray, list[list[int]]] | None = None

    def drawn(self, epoch: int) -> np.ndarray:
        """The general pairs (indices into the general train split) epoch ``epoch`` replays."""
        return self._epoch(epoch)[1]

    def batches(self, epoch: int) -> list[list[int]]:
        """This rank's batches of ``epoch``: user pairs i < n, drawn general pairs n + j."""
        return self._epoch(epoch)[2]

    def locate(self, i: int, epoch: int) -> tuple[bool, int]:
        """Pair ``i`` of a batch of ``epoch``: (False, user index) or (True, general index)."""
        return (False, i) if i < self.n_user else (True, int(self.drawn(epoch)[i - self.n_user]))

    def target_lengths(self, epoch: int) -> np.ndarray:
        """The target lengths of ``epoch``'s pairs, in batch index order."""
        variant = epoch % len(self.user_tgt)
        return np.concatenate([self.user_tgt[variant], self.general_tgt[self.drawn(epoch)]])

    def _epoch(self, epoch: int) -> tuple[int, np.ndarray, list[list[int]]]:
        if self._cache is None or self._cache[0] != epoch:
            rng = np.random.default_rng([self.seed, epoch, 1])  # another stream than the batch order's
            drawn = draw(rng, self.general_tgt, self.tokens)
            variant = epoch % len(self.user_src)
            joined = TokenBatchSampler(
                src_lengths=np.concatenate([self.user_src[variant], self.general_src[drawn]]),
                tgt_lengths=np.concatenate([self.user_tgt[variant], self.general_tgt[drawn]]),
                max_tokens=self.max_tokens,
                seed=self.seed,
                num_replicas=self.replicas[0],
                rank=self.replicas[1],
            )
            self._cache = (epoch, drawn, joined.batches(epoch))
        return self._cache


def replay_sampler(
    train_sets: list[ParallelDataset], general: ParallelDataset, replay: Replay, **sampler
) -> ReplaySampler:
    """The sampler of a run that replays ``general`` beside its ``train_sets`` (its segmentations);
    ``sampler``: max_tokens, seed, replicas."""
    return ReplaySampler(
        user=(np.stack([d.src_lengths for d in train_sets]), np.stack([d.tgt_lengths for d in train_sets])),
        general=(general.src_lengths, general.tgt_lengths),
        share=replay.share,
        **sampler,
    )
