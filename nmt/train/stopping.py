"""When a run stops, saves and validates. Section 5.2 trains for a number of updates (100k base, 300k
big); the other limits are named options: ``max_epochs``, ``max_time`` (training minutes, counted on
across resumes), the end of the final linear decay (``decay_fraction``, `optim.Schedule`), early
stopping (``patience``), and a stop signal (SIGTERM / SIGINT: `distributed.Preemption`).

After every update the loop takes one decision for the whole job (`after_update`): rank 0's view
(`local_decision`: its update counter and its clock) combined with every rank's stop signal by one
all-reduce(MAX) of a few integers, so every rank gets the same answer and a job never hangs. "This
rank's data is exhausted" (max_epochs) is summed with the update's token count before the update, so
all ranks stop together. A resumed run first asks `reached` whether it already stopped."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from ..config import TrainConfig
from .distributed import Collectives
from .optim import Schedule
from .state import Progress

# Reasons a run stops; the index is the code exchanged between ranks (0 = keep going).
STOP_REASONS = (None, "max_steps", "max_time", "max_epochs", "preempted", "decay_end")


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


@dataclass(frozen=True)
class Decision:
    """What every rank does after an update."""

    stop: str | None  # one of STOP_REASONS
    save: bool
    validate: bool
    decay: bool = False  # the learning-rate decay (train.decay_fraction) starts after this update


def limit(cfg: TrainConfig, schedule: Schedule, *, update: int, elapsed: float) -> str | None:
    """The limit that update ``update`` after ``elapsed`` seconds has reached: max_steps, the end of
    the decay, max_time (in that order), or None."""
    if cfg.max_steps and update >= cfg.max_steps:
        return "max_steps"
    if schedule.finished(update):
        return "decay_end"
    if cfg.max_time and elapsed >= cfg.max_time * 60:
        return "max_time"
    return None


def epochs_done(cfg: TrainConfig, epoch: int) -> bool:
    """Whether the data of max_epochs epochs has been trained on."""
    return bool(cfg.max_epochs) and epoch >= cfg.max_epochs


HIGHER_IS_BETTER = {"loss": False, "bleu": True}  # train.best_metric: the way a validation score improves


def better(best_metric: str, value: float, best: float | None) -> bool:
    """Whether a validation score ``value`` of ``best_metric`` beats the ``best`` so far (None: no
    score yet); a tie does not."""
    if best is None:
        return True
    return value > best if HIGHER_IS_BETTER[best_metric] else value < best


def out_of_patience(cfg: TrainConfig, since_best: int) -> bool:
    """Early stopping (fairseq's --patience, Marian's --early-stopping): ``train.patience``
    validations in a row without a better ``best_metric``."""
    return bool(cfg.patience) and since_best >= cfg.patience


def local_decision(
    cfg: TrainConfig, schedule: Schedule, *, update: int, elapsed: float, since_save: float
) -> list[int]:
    """Rank 0's view after update ``update``: [stop code, save, validate, start the decay] (times in
    seconds; save_every_minutes in minutes). The decay starts once the run has used
    ``1 - decay_fraction`` of max_steps or of max_time, unless the run stops here."""
    stop = STOP_REASONS.index(limit(cfg, schedule, update=update, elapsed=elapsed))
    save = bool(
        (cfg.save_every_steps and update % cfg.save_every_steps == 0)
        or (cfg.save_every_minutes and since_save >= cfg.save_every_minutes * 60)
    )
    validate = bool(cfg.valid_every_steps and update % cfg.valid_every_steps == 0)
    decay = not stop and schedule.decay_due(update=update, elapsed=elapsed)
    return [stop, int(save), int(validate), int(decay)]


def decide(coll: Collectives, local: Sequence[int], *, preempted: bool) -> Decision:
    """One decision for the whole job: rank 0's ``local`` ([stop, save, validate, decay]; other
    ranks' are ignored) combined with every rank's stop signal by one all-reduce(MAX). A limit wins
    over a signal (validate, then stop)."""
    flags = [*(local if coll.rank == 0 else [0, 0, 0, 0]), int(preempted)]
    stop, save, validate, decay, preempt = coll.max(flags, what="the stop/save/validate decision")
    if not stop and preempt:
        stop = STOP_REASONS.index("preempted")
    return Decision(stop=STOP_REASONS[stop], save=bool(save), validate=bool(validate), decay=bool(decay))


def after_update(
    cfg: TrainConfig,
    schedule: Schedule,
    coll: Collectives,
    *,
    progress: Progress,
    clock: Clock,
    preempted: bool,
) -> Decision:
    """The decision after the update ``progress`` counts: rank 0's counters and clock, any rank's
    stop signal (or a log it cannot write: ``preempted``)."""
    local = local_decision(
        cfg, schedule, update=progress.update, elapsed=progress.elapsed, since_save=clock.since_save()
    )
    return decide(coll, local, preempted=preempted)


def stops_after_validation(cfg: TrainConfig, decision: Decision, progress: Progress) -> str | None:
    """Why the run stops after the validation ``decision`` asked for: a stop signal that cut it
    short (its checkpoint is written), the decision's own stop, or patience (rank 0's since_best,
    shared by the validation)."""
    if progress.validation_pending:
        return "preempted"
    if decision.stop is None and out_of_patience(cfg, progress.since_best):
        return "patience"
    return decision.stop


def reached(cfg: TrainConfig, schedule: Schedule, progress: Progress, *, epoch: int) -> str | None:
    """The limit a (resumed) run has already reached, said for the log, or None."""
    reason = limit(cfg, schedule, update=progress.update, elapsed=progress.elapsed)
    if reason == "max_steps":
        return f"max_steps={cfg.max_steps}"
    if epochs_done(cfg, epoch):
        return f"max_epochs={cfg.max_epochs}"
    if reason == "decay_end":
        return f"the end of the learning-rate decay (update {schedule.decay_end})"
    if reason == "max_time":
        return f"max_time={cfg.max_time} min"
    if out_of_patience(cfg, progress.since_best):
        return (
            f"patience={cfg.patience}: {progress.since_best} validations without a better {cfg.best_metric}"
        )
    return None
