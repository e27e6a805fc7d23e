"""nmt/train/optim.py: `Schedule`, the learning rate of every update (eq. 3 and the final decay)."""

from __future__ import annotations

import math

import pytest

from nmt.config import ModelConfig, TrainConfig
from nmt.train.optim import Schedule, inverse_sqrt_lr, linear_decay


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


@pytest.mark.parametrize("step", [1, 4000, 40000])
def test_schedule_formula(step):
    d_model, warmup = 512, 4000
    expected = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
    assert inverse_sqrt_lr(step, d_model=d_model, warmup_steps=warmup) == pytest.approx(expected, rel=1e-12)


def test_linear_decay_factor():
    assert linear_decay(5, decay_start=0, decay_end=0) == 1.0  # no decay: eq. 3 as it is
    assert [linear_decay(s, decay_start=6, decay_end=10) for s in range(5, 12)] == [
        1,
        1,
        1,
        0.75,
        0.5,
        0.25,
        0,
    ]


def test_schedule_values():
    assert inverse_sqrt_lr(1, d_model=512, warmup_steps=4000) == pytest.approx(512**-0.5 * 4000**-1.5)
    peak = inverse_sqrt_lr(4000, d_model=512, warmup_steps=4000)
    assert peak == pytest.approx(512**-0.5 / math.sqrt(4000))  # ~7.0e-4 at the end of warm-up
    assert inverse_sqrt_lr(40000, d_model=512, warmup_steps=4000) == pytest.approx(peak / math.sqrt(10))
    assert inverse_sqrt_lr(4000, d_model=512, warmup_steps=4000, lr_scale=2.0) == pytest.approx(2 * peak)


def test_declared_torch_floor_covers_fused_cpu_adam():
    """build_adam uses fused=True, which CPU tensors support from torch 2.4;
    pyproject.toml must not promise an older torch. (The declared floor, not the installed torch.)"""
    import re
    from pathlib import Path

    import torch

    from nmt.train.optim import build_adam

    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    floor = re.search(r'"torch>=(\d+)\.(\d+)', text)
    assert floor, "pyproject.toml declares no torch floor"
    assert (int(floor.group(1)), int(floor.group(2))) >= (2, 4)
    opt = build_adam(torch.nn.Linear(2, 2).parameters(), betas=(0.9, 0.98), eps=1e-9)  # fused on CPU here
    assert opt.param_groups[0]["fused"]
