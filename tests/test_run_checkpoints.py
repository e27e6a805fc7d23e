"""nmt/train/run_checkpoints.py: what trainer_state.json holds and what a resume restores from it."""

from __future__ import annotations

import json

import numpy as np
import torch

from nmt.config import ModelConfig, TrainConfig
from nmt.data.batching import TokenBatchSampler
from nmt.train.optim import Schedule
from nmt.train.run_checkpoints import RunState, restore, trainer_state
from nmt.train.state import Progress, rng_state


def run_state() -> RunState:
    model = torch.nn.Linear(2, 2)
    lengths = np.array([3, 5, 4, 6, 2, 7, 5, 3], dtype=np.int32)
    return RunState(
        model=model,
        optimizer=torch.optim.Adam(model.parameters()),
        sampler=TokenBatchSampler(src_lengths=lengths, tgt_lengths=lengths, max_tokens=16, seed=1),
        progress=Progress(),
        schedule=Schedule.of(ModelConfig(), TrainConfig(max_steps=20, decay_fraction=0.5)),
        accum=2,
    )


def test_a_checkpoint_restores_progress_schedule_data_position_rng_and_unwritten_log():
    state = run_state()
    state.progress = Progress(update=14, best=3.5, best_step=10, since_best=1, elapsed=9.5, tokens_seen=700)
    state.schedule.start_decay(10)
    state.sampler.epoch, state.sampler.position = 1, 2
    ranks = [{"rng": rng_state(), "position": [1, 2]}]
    saved = trainer_state(state, ranks, world=1, unwritten_log={"train.log": ["a line"]})
    assert list(saved) == [  # the layout tools read (nmt's tests, run_dir.checkpoint_step)
        "step", "epoch", "position", "best", "best_step", "since_best", "validation_pending", "elapsed",
        "tokens_seen", "world_size", "decay_start", "decay_end", "accum", "rng", "positions", "unwritten_log",
    ]  # fmt: skip
    saved = json.loads(json.dumps(saved))
    expected = torch.rand(3)  # what the generator draws after the checkpoint
    fresh = run_state()
    progress, unwritten = restore(fresh, saved, rank=0)
    assert progress == state.progress and fresh.schedule == state.schedule
    assert fresh.sampler.state_dict() == {"epoch": 1, "position": 2}
    assert unwritten == {"train.log": ["a line"]} and torch.equal(torch.rand(3), expected)


def test_a_trainer_state_of_the_old_layout_still_resumes():
    """A checkpoint written before best_step, since_best, validation_pending, the decay and every
    rank's position were saved: its counters and data position are restored, the rest starts fresh."""
    old = {
        "step": 12,
        "epoch": 1,
        "position": 3,
        "best": 4.25,
        "elapsed": 30.0,
        "tokens_seen": 5000,
        "world_size": 1,
        "accum": 1,
        "rng": rng_state(),
    }
    fresh = run_state()
    progress, unwritten = restore(fresh, json.loads(json.dumps(old)), rank=0)
    assert progress == Progress(update=12, best=4.25, elapsed=30.0, tokens_seen=5000)
    assert (fresh.schedule.decay_start, fresh.schedule.decay_end) == (0, 0) and unwritten == {}
    assert fresh.sampler.state_dict() == {"epoch": 1, "position": 3}
