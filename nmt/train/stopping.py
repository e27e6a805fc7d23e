"""When a run stops. Section 5.2 trains for a number of updates (100k base, 300k big); the other limits
are named options: ``max_epochs``, ``max_time`` (training minutes, counted on across resumes), the end
of the final linear decay (``decay_fraction``), early stopping (``patience``), and a stop signal
(SIGTERM / SIGINT: `distributed.Preemption`).

After every update the loop takes one decision for the whole job: rank 0's view (`after_update`,
which is `distributed.local_decision` with the run's limits) combined with every rank's stop signal
(`distributed.Collectives.decide`). A resumed run first asks `reached` whether it already stopped."""

from __future__ import annotations

import math
import time

from ..config import TrainConfig
from . import distributed


class Clock:
    """Training seconds (a resumed run's go on from its ``elapsed``) and seconds since the last
    checkpoint."""

    def __init__(self, elapsed: float):
        self.start, self.last_save = time.time() - elapsed, time.time()

    def elapsed(self) -> float:
        return time.time() - self.start

    def since_save(self) -> float:
        return time.time() - self.last_save

    def saved(self) -> None:
        self.last_save = time.time()


def after_update(
    cfg: TrainConfig, *, step: int, elapsed: float, since_save: float, decay_end: int
) -> list[int]:
    """Rank 0's view after update ``step``: [stop code, save, validate, start the decay]
    (`distributed.local_decision` with the limits of ``cfg``)."""
    return distributed.local_decision(
        step=step,
        elapsed=elapsed,
        since_save=since_save,
        max_steps=cfg.max_steps,
        max_time=cfg.max_time,
        save_every_steps=cfg.save_every_steps,
        save_every_minutes=cfg.save_every_minutes,
        valid_every_steps=cfg.valid_every_steps,
        decay_fraction=cfg.decay_fraction,
        decay_end=decay_end,
    )


def out_of_patience(cfg: TrainConfig, since_best: int) -> bool:
    """Early stopping (fairseq's --patience, Marian's --early-stopping): ``train.patience``
    validations in a row without a better ``best_metric``."""
    return bool(cfg.patience) and since_best >= cfg.patience


def reached(
    cfg: TrainConfig, *, step: int, epoch: int, elapsed: float, decay_end: int, since_best: int
) -> str | None:
    """The limit a (resumed) run has already reached, or None."""
    if cfg.max_steps and step >= cfg.max_steps:
        return f"max_steps={cfg.max_steps}"
    if cfg.max_epochs and epoch >= cfg.max_epochs:
        return f"max_epochs={cfg.max_epochs}"
    if decay_end and step >= decay_end:
        return f"the end of the learning-rate decay (update {decay_end})"
    if cfg.max_time and elapsed >= cfg.max_time * 60:
        return f"max_time={cfg.max_time} min"
    if out_of_patience(cfg, since_best):
        return f"patience={cfg.patience}: {since_best} validations without a better {cfg.best_metric}"
    return None


def decay_window(cfg: TrainConfig, step: int) -> tuple[int, int]:
    """(first, last) update of the final linear decay (train.decay_fraction) that starts after update
    ``step``: it ends at max_steps when the steps limit started it, else after as many updates as the
    remaining time holds at the rate so far (step / (1 - decay_fraction) in all), or max_steps."""
    keep = 1.0 - cfg.decay_fraction
    if cfg.max_steps and step >= keep * cfg.max_steps:
        end = cfg.max_steps
    else:  # max_time started it
        end = math.ceil(step / keep)
        end = min(end, cfg.max_steps) if cfg.max_steps else end
    return step, max(end, step + 1)
