"""A training run's data: the train segmentations (with BPE-dropout, K sampled copies), this rank's
sampler over them (its state is the run's data position; with --replay, general pairs drawn beside
them: nmt.train.replay), the micro-batches across epochs, the accumulation count that gives an update
about ``update_tokens`` target tokens (section 5.1), and the valid split."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import TrainConfig
from ..data.batching import TokenBatchSampler, collate
from ..data.dataset import ParallelDataset
from ..data.download import DataError
from . import validation
from .distributed import Collectives
from .replay import Replay, ReplaySampler, replay_sampler
from .stopping import epochs_done


def train_segmentations(data_dir: Path, meta: dict, *, bpe_dropout: bool) -> list[ParallelDataset]:
    """The train segmentations: the usual one, or with BPE-dropout the K sampled copies (epoch e trains
    on copy (e mod K) + 1)."""
    sets = [ParallelDataset.load(data_dir, "train")]
    samples = meta.get("train_samples")
    if samples and bpe_dropout:
        sets = [ParallelDataset(data_dir, name, meta) for name in samples["splits"]]
        if any(len(d) != samples["pairs"] for d in sets):
            raise DataError(
                f"{data_dir}: a BPE-dropout copy does not hold the "
                f"{samples['pairs']} train pairs meta.json names; prepare again"
            )
    return sets


@dataclass
class RunData:
    """The train segmentations and this rank's sampler over them; the valid split (None if not
    prepared or empty: ``valid_empty``); with --replay, the general train split drawn from
    (``general``). Pairs come as the model learns them (`pair`)."""

    train_sets: list[ParallelDataset]
    sampler: TokenBatchSampler | ReplaySampler
    valid_set: ParallelDataset | None
    valid_empty: bool
    right_to_left: bool  # ModelConfig.right_to_left: targets reversed
    general: ParallelDataset | None = None

    @classmethod
    def load(
        cls,
        data_dir: Path,
        meta: dict,
        cfg: TrainConfig,
        *,
        coll: Collectives,
        right_to_left: bool,
        replay: Replay | None = None,
    ) -> "RunData":
        train_sets = train_segmentations(data_dir, meta, bpe_dropout=cfg.bpe_dropout)
        splits = meta.get("splits", {"valid": 1})
        valid_set = ParallelDataset.load(data_dir, "valid") if "valid" in splits else None
        valid_empty = valid_set is not None and len(valid_set) == 0
        general = None if replay is None else ParallelDataset.load(replay.directory, "train")
        if general is not None:
            sampler = replay_sampler(
                train_sets,
                general,
                replay,
                max_tokens=cfg.max_tokens,
                seed=cfg.seed,
                replicas=(coll.world, coll.rank),
            )
        else:
            sampler = TokenBatchSampler(
                src_lengths=[d.src_lengths for d in train_sets],
                tgt_lengths=[d.tgt_lengths for d in train_sets],
                max_tokens=cfg.max_tokens,
                seed=cfg.seed,
                num_replicas=coll.world,
                rank=coll.rank,
            )
        return cls(
            train_sets=train_sets,
            sampler=sampler,
            valid_set=None if valid_empty else valid_set,  # no pair to score (its loss would divide by 0)
            valid_empty=valid_empty,
            right_to_left=right_to_left,
            general=general,
        )

    def accumulation_steps(self, cfg: TrainConfig, coll: Collectives) -> int:
        """Micro-batches per update so that world * accum * (mean target tokens per batch) ~
        update_tokens. The mean is over the batches of all shards (summed across ranks), so every rank
        gets the same count."""
        if cfg.accum_steps:
            return cfg.accum_steps
        batches = self.sampler.batches(0)
        tgt = self.sampler.target_lengths(0) if self.general is not None else self.train_sets[0].tgt_lengths
        tokens = sum(int(tgt[b].sum()) + len(b) for b in batches)  # target tokens incl. EOS
        tokens, n_batches = coll.sum([tokens, len(batches)], what="the accumulation count")
        mean_tokens = tokens / n_batches if n_batches else 1.0
        return max(1, round(cfg.update_tokens / (coll.world * mean_tokens)))

    def warnings(self, data_dir: Path, *, max_positions: int) -> list[str]:
        """What the log warns of before training: no valid pair; valid pairs longer than
        ``max_positions`` (validation truncates them)."""
        warnings = []
        if self.valid_empty:
            warnings.append(
                f"warning: the valid split of {data_dir} has no pairs: no validation, no best "
                "checkpoint (prepare with --valid SRC TGT to validate)"
            )
        too_long = validation.too_long(self.valid_set, max_positions) if self.valid_set is not None else 0
        if too_long:
            warnings.append(
                f"warning: {too_long} of {len(self.valid_set)} valid pairs have a side longer "
                f"than model.max_positions={max_positions} (with EOS/BOS); validation truncates them"
            )
        return warnings

    def segmentations_note(self, meta: dict) -> str:
        """What the log says of BPE-dropout's sampled copies of train."""
        k = len(self.train_sets)
        return (
            f"BPE-dropout (p={meta['train_samples']['bpe_dropout']}): {k} sampled "
            f"segmentations of train; epoch e trains on train.bpe{{(e mod {k}) + 1}}"
        )

    def replay_note(self, replay: Replay) -> str:
        """What the log says of the general pairs replayed (--replay)."""
        return (
            f"replay: {len(self.sampler.drawn(0))} pairs ({self.sampler.tokens} target tokens) of "
            f"{replay.directory}'s train drawn in epoch 0 beside the {self.sampler.n_user} of the run's "
            f"data: {replay.share:.0%} of the target tokens, a new draw every epoch"
        )

    def micro_batches(self, cfg: TrainConfig):
        """The micro-batches of this rank across epochs (the sampler knows the position of the next),
        until max_epochs (`stopping.epochs_done`)."""
        while True:
            if epochs_done(cfg, self.sampler.epoch):
                return
            train_set = self.train_sets[self.sampler.epoch % len(self.train_sets)]
            for indices in self.sampler:  # advances the sampler's position
                yield collate([self.pair(*self.locate(train_set, i)) for i in indices])
            self.sampler.set_epoch(self.sampler.epoch + 1)

    def locate(self, train_set: ParallelDataset, i: int) -> tuple[ParallelDataset, int]:
        """Where pair ``i`` of a batch of this epoch is: ``train_set``'s pair i, or (with --replay)
        a general pair drawn for the epoch."""
        if self.general is None:
            return train_set, i
        general, index = self.sampler.locate(i, self.sampler.epoch)
        return (self.general, index) if general else (train_set, index)

    def pair(self, dataset: ParallelDataset, i: int, limit: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Pair ``i`` of ``dataset`` as the model learns it: (source, target) pieces, the target
        reversed for a right-to-left model; ``limit``: truncated first."""
        src, tgt = dataset[i] if not limit else validation.truncate(dataset[i], limit)
        return (src, tgt[::-1]) if self.right_to_left else (src, tgt)
