"""nmt/train/state.py: `Progress`, how far a run is, saved and restored whole."""

from __future__ import annotations

import dataclasses

import pytest

from nmt.train.state import Progress, saved_update


def test_progress_round_trips_whole_under_the_checkpoint_keys():
    progress = Progress(
        update=40,
        best=21.5,
        best_metric="bleu",
        best_step=30,
        since_best=1,
        validation_pending=True,
        elapsed=61.5,
        tokens_seen=9000,
    )
    saved = progress.to_dict()
    assert saved["update"] == 40 and "step" not in saved  # trainer_state.json's key
    assert set(saved) == {f.name for f in dataclasses.fields(Progress)}
    assert Progress.from_dict(saved) == progress


def test_the_update_count_is_read_as_update_or_as_the_step_of_older_runs():
    """trainer_state.json and metrics.jsonl records say "update"; runs before wrote "step"."""
    assert saved_update({"update": 7, "epoch": 1}) == 7 and saved_update({"step": 7, "epoch": 1}) == 7
    with pytest.raises(KeyError):
        saved_update({"epoch": 1})
    old = {"step": 12, "best": None, "elapsed": 30, "tokens_seen": 5000}
    assert Progress.from_dict(old).update == 12
    assert Progress.from_dict({**old, "update": 13}).update == 13


def test_progress_reads_a_trainer_state_saved_before_best_step_and_patience():
    """A trainer_state.json of a run from before best_step, since_best, validation_pending and the
    decay were saved: those start as a fresh run's."""
    old = {"step": 12, "epoch": 1, "position": 3, "best": 4.25, "elapsed": 30, "tokens_seen": 5000, "rng": {}}
    assert Progress.from_dict(old) == Progress(update=12, best=4.25, elapsed=30.0, tokens_seen=5000)


def test_the_best_of_a_trainer_state_saved_before_best_metric_is_read_as_the_metric_itself():
    """Before best_metric was saved, ``best`` held -BLEU for train.best_metric=bleu (lower was
    better) and the loss for loss; both read back as the score itself, and a saved best_metric wins
    over the run's."""
    old = {"step": 12, "best": -27.5, "best_step": 10, "elapsed": 30, "tokens_seen": 5000}
    bleu = Progress.from_dict(old, best_metric="bleu")
    assert (bleu.best, bleu.best_metric, bleu.best_step) == (27.5, "bleu", 10)
    loss = Progress.from_dict({**old, "best": 3.25}, best_metric="loss")
    assert (loss.best, loss.best_metric) == (3.25, "loss")
    assert Progress.from_dict({**old, "best": None}, best_metric="bleu").best is None
    saved = Progress.from_dict({**old, "best": 27.5, "best_metric": "bleu"}, best_metric="loss")
    assert (saved.best, saved.best_metric) == (27.5, "bleu")


def test_a_trainer_state_without_its_counters_is_refused():
    with pytest.raises(KeyError):
        Progress.from_dict({"step": 1})
