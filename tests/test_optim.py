"""nmt/train/optim.py: `Schedule`, the learning rate of every update (eq. 3 and the final decay)."""

from __future__ import annotations

import pytest

from nmt.config import ModelConfig, TrainConfig
from nmt.train.optim import Schedule, inverse_sqrt_lr


def schedule(**train) -> Schedule:
    return Schedule.of(ModelConfig(d_model=32, n_heads=4), TrainConfig(warmup_steps=10, **train))


def test_step_update_is_eq3_then_the_linear_decay():
    s = schedule(max_steps=20, decay_fraction=0.5)
    assert [s.step_update(u) for u in range(1, 21)] == [
        inverse_sqrt_lr(u, d_model=32, warmup_steps=10) for u in range(1, 21)
    ]  # no decay before it starts
    s.start_decay(10)
    assert (s.decay_start, s.decay_end) == (10, 20)
    for u in range(1, 21):
        eq3 = inverse_sqrt_lr(u, d_model=32, warmup_steps=10)
        assert s.step_update(u) == pytest.approx(eq3 * (1 if u <= 10 else (21 - u) / 10), rel=1e-12), u
    assert not s.finished(19) and s.finished(20)


def test_the_decay_starts_at_its_fraction_of_steps_or_time_and_ends_with_the_run():
    s = schedule(max_steps=10, max_time=1.0, decay_fraction=0.25)
    assert not s.decay_due(update=7, elapsed=1.0) and s.decay_due(update=8, elapsed=1.0)  # 7.5 updates
    assert s.decay_due(update=2, elapsed=45.0)  # 45 s of 60
    s.start_decay(8)
    assert (s.decay_start, s.decay_end) == (8, 10)  # max_steps started it: it ends there
    assert not s.decay_due(update=9, elapsed=50.0)  # under way
    timed = schedule(max_time=1.0, decay_fraction=0.25)
    timed.start_decay(6)  # 45 s for 6 updates: 8 in the minute
    assert (timed.decay_start, timed.decay_end) == (6, 8)
    capped = schedule(max_steps=7, max_time=1.0, decay_fraction=0.25)
    capped.start_decay(3)
    assert (capped.decay_start, capped.decay_end) == (3, 4)  # ceil(3 / 0.75) = 4 <= max_steps
    capped.start_decay(6)
    assert (capped.decay_start, capped.decay_end) == (6, 7)  # max_steps (5.25 updates) started it


def test_the_schedule_state_is_saved_and_restored():
    s = schedule(max_steps=20, decay_fraction=0.5)
    s.start_decay(12)
    restored = schedule(max_steps=20, decay_fraction=0.5)
    restored.load_dict(s.to_dict())
    assert restored == s and restored.step_update(15) == s.step_update(15)
    restored.load_dict({"step": 3})  # a checkpoint saved before the decay existed: not started
    assert (restored.decay_start, restored.decay_end) == (0, 0)
