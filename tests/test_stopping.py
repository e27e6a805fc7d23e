"""nmt/train/stopping.py: the stop, save and validate rules of one update, decided once for the job."""

from __future__ import annotations

import torch

from nmt.config import ModelConfig, TrainConfig
from nmt.train import distributed, stopping
from nmt.train.optim import Schedule
from nmt.train.state import Progress

LIMITS = dict(max_steps=10, max_time=1.0, save_every_steps=4, save_every_minutes=0.5, valid_every_steps=5)


def decision(*, update: int, elapsed: float, since_save: float, decay_fraction=0.0, decay_end=0) -> list[int]:
    cfg = TrainConfig(**LIMITS, decay_fraction=decay_fraction)
    schedule = Schedule.of(ModelConfig(), cfg)
    schedule.decay_end = decay_end
    return stopping.local_decision(cfg, schedule, update=update, elapsed=elapsed, since_save=since_save)


def test_one_decision_per_update():
    assert decision(update=3, elapsed=1.0, since_save=1.0) == [0, 0, 0, 0]
    assert decision(update=4, elapsed=1.0, since_save=1.0) == [0, 1, 0, 0]
    assert decision(update=5, elapsed=1.0, since_save=31.0) == [0, 1, 1, 0]
    assert decision(update=6, elapsed=60.0, since_save=1.0) == [2, 0, 0, 0]  # max_time
    assert decision(update=10, elapsed=60.0, since_save=1.0) == [1, 0, 1, 0]  # max_steps
    # train.decay_fraction=0.25: the decay starts at 3/4 of max_steps or of max_time, whichever comes first
    assert decision(update=7, elapsed=1.0, since_save=1.0, decay_fraction=0.25)[3] == 0
    assert decision(update=8, elapsed=1.0, since_save=1.0, decay_fraction=0.25)[3] == 1  # 7.5 updates
    assert decision(update=2, elapsed=45.0, since_save=1.0, decay_fraction=0.25)[3] == 1  # 45 s of 60
    assert (
        decision(update=8, elapsed=1.0, since_save=1.0, decay_fraction=0.25, decay_end=9)[3] == 0
    )  # started
    assert decision(update=9, elapsed=1.0, since_save=1.0, decay_fraction=0.25, decay_end=9)[0] == 5  # ended
    coll = distributed.Collectives(
        device=torch.device("cpu"), rank=0, world=1, active=False, timeout_minutes=1
    )
    assert stopping.decide(coll, [0, 1, 0, 0], preempted=True) == stopping.Decision(
        stop="preempted", save=True, validate=False
    )
    assert stopping.decide(coll, [1, 0, 1, 0], preempted=True).stop == "max_steps"  # a limit wins
    assert stopping.decide(coll, [0, 0, 0, 0], preempted=False) == stopping.Decision(
        stop=None, save=False, validate=False
    )
    assert stopping.decide(coll, [0, 0, 0, 1], preempted=False).decay


def test_a_resumed_run_knows_the_limit_it_reached():
    """`reached` checks the limits in the order the loop stops at them, and says which."""
    cfg = TrainConfig(max_steps=10, max_epochs=2, max_time=1.0, patience=2)
    schedule = Schedule.of(ModelConfig(), cfg)
    assert stopping.reached(cfg, schedule, Progress(update=9, elapsed=1.0), epoch=1) is None
    assert stopping.reached(cfg, schedule, Progress(update=10, elapsed=60.0), epoch=2) == "max_steps=10"
    assert stopping.reached(cfg, schedule, Progress(update=9, elapsed=60.0), epoch=2) == "max_epochs=2"
    assert stopping.reached(cfg, schedule, Progress(update=9, elapsed=60.0), epoch=1) == "max_time=1.0 min"
    schedule.decay_start, schedule.decay_end = 6, 9
    assert "decay (update 9)" in stopping.reached(cfg, schedule, Progress(update=9, elapsed=60.0), epoch=1)
    patience = stopping.reached(cfg, schedule, Progress(update=5, since_best=2), epoch=0)
    assert patience == "patience=2: 2 validations without a better loss"


def test_a_better_score_is_higher_bleu_or_lower_loss_and_a_tie_is_not():
    assert stopping.better("bleu", 30.5, 30.0) and not stopping.better("bleu", 29.5, 30.0)
    assert stopping.better("loss", 2.5, 3.0) and not stopping.better("loss", 3.5, 3.0)
    assert not stopping.better("bleu", 30.0, 30.0) and not stopping.better("loss", 3.0, 3.0)
    assert stopping.better("bleu", 0.0, None) and stopping.better("loss", 9.0, None)
