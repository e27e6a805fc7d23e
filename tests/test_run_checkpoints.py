"""nmt/train/run_checkpoints.py: what trainer_state.json holds and what a resume restores from it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from train_fixtures import tiny_args

from nmt import checkpoint as ckpt
from nmt.cli import main
from nmt.config import ModelConfig, TrainConfig
from nmt.data.batching import TokenBatchSampler
from nmt.train.distributed import Collectives
from nmt.train.optim import Schedule
from nmt.train.run_checkpoints import Checkpoints, RunState, restore, trainer_state
from nmt.train.run_log import RunLog
from nmt.train.state import Progress, rng_state

TINY = tiny_args("--train.max_tokens=512")


def train(data, out, *extra):
    return main(["train", str(data), "--out", str(out), *TINY, *extra])


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def run_state(best_metric: str = "loss") -> RunState:
    model = torch.nn.Linear(2, 2)
    lengths = np.array([3, 5, 4, 6, 2, 7, 5, 3], dtype=np.int32)
    return RunState(
        model=model,
        optimizer=torch.optim.Adam(model.parameters()),
        sampler=TokenBatchSampler(src_lengths=lengths, tgt_lengths=lengths, max_tokens=16, seed=1),
        progress=Progress(best_metric=best_metric),
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
        "update", "epoch", "position", "best", "best_metric", "best_step", "since_best", "validation_pending",
        "elapsed", "tokens_seen", "world_size", "decay_start", "decay_end", "accum", "rng", "positions",
        "unwritten_log",
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


def kept_as_best(progress: Progress, bleus: list[float], run_dir) -> list[bool]:
    """Which of the validations scoring ``bleus`` (one per update after ``progress``'s) a
    best_metric=bleu run keeps as its best."""
    checkpoints = Checkpoints(
        run_dir,
        coll=Collectives(device=torch.device("cpu"), rank=0, world=1, active=False, timeout_minutes=1),
        logs=RunLog(run_dir, enabled=True),
        keep_last=1,
        spm_model=run_dir / "spm.model",
    )
    kept = []
    for bleu in bleus:
        progress.update += 1
        kept.append(checkpoints.score(progress, {"loss": 3.0, "bleu": bleu}, best_metric="bleu", epoch=1))
    return kept


def test_a_bleu_run_saved_when_best_held_minus_bleu_resumes_to_the_same_decisions(tmp_path):
    """A trainer_state.json of a best_metric=bleu run saved before best_metric was (its best: -BLEU)
    resumes as the run that wrote it goes on: the same validations are kept as the best, and best
    then holds BLEU itself."""
    bleus = [29.0, 30.0, 30.5, 30.5, 12.0, 31.0]
    going_on = Progress(update=10, best=30.0, best_metric="bleu", best_step=10, elapsed=9.5, tokens_seen=700)
    expected = kept_as_best(going_on, bleus, tmp_path)
    assert expected == [False, False, True, False, False, True]
    old = {
        "step": 10,
        "epoch": 1,
        "position": 2,
        "best": -30.0,
        "best_step": 10,
        "since_best": 0,
        "elapsed": 9.5,
        "tokens_seen": 700,
        "world_size": 1,
        "accum": 2,
        "rng": rng_state(),
    }
    progress, _ = restore(run_state("bleu"), json.loads(json.dumps(old)), rank=0)
    assert (progress.best, progress.best_metric) == (30.0, "bleu")
    assert kept_as_best(progress, bleus, tmp_path) == expected and progress == going_on


# ----------------------------------------------------------------------------- stuck runs
@pytest.mark.parametrize("resume", [False, True])
def test_run_killed_before_its_first_checkpoint_can_start_again(tiny_data, finished_run_copy, resume):
    """A run dir with config.json and no complete checkpoint can be resumed (--resume) and
    restarted (neither 'no complete checkpoint' nor 'already holds a run')."""
    shutil.rmtree(finished_run_copy / "checkpoints")  # what a kill before the first checkpoint leaves
    extra = ["--resume"] if resume else TINY
    assert (
        main(
            [
                "train",
                str(tiny_data),
                "--out",
                str(finished_run_copy),
                *extra,
                "--train.max_steps=2",
                "--train.save_every_steps=1",
            ]
        )
        == 0
    )
    assert [p.name for p in ckpt.list_step_checkpoints(finished_run_copy)] == [
        "step_00000001",
        "step_00000002",
    ]
    assert [(r["split"], r["update"]) for r in records(finished_run_copy)] == [
        ("train", 1),
        ("valid", 2),
    ]  # not twice
    assert "starting it again from step 0" in (finished_run_copy / "train.log").read_text()


def test_a_run_directory_that_cannot_be_cleaned_is_an_error_and_gives_its_lock_back(
    tiny_data, tmp_path, monkeypatch, capsys
):
    """Removing a killed writer's temporaries fails (an OSError after the lock is taken): a one-line
    error naming RUN_DIR, exit 2, and the lock released (it used to stay held by the process)."""

    def cannot(folder):
        raise PermissionError(13, "Permission denied", str(folder / "step_00000003.tmp"))

    monkeypatch.setattr(ckpt, "clean_stale", cannot)
    run = tmp_path / "run"
    assert train(tiny_data, run, "--train.max_steps=1") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"nmt train: error: {run}: could not take it over")
    assert "Permission denied" in err[0]
    assert not (run / "train.lock").exists()
