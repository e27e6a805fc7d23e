"""nmt/train/guard_valid.py: a second validation set that guards what a fine-tuned model knew
(`nmt train --init CKPT --guard-valid DIR_OR_FILES --guard-bleu-drop B`): the start's guard BLEU at
update 0, the best checkpoint the best in-domain one within B of it, resumed alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from train_fixtures import tiny_args

from nmt.cli import main
from nmt.train.guard_valid import admits, best_of, open_guard
from nmt.train.trainer import Trainer

TINY = tiny_args("--train.max_tokens=512", "--train.accum_steps=1", "--train.log_every_steps=1")


def v(loss: float, guard: float, bleu: float = 0.0) -> dict:
    return {"loss": loss, "bleu": bleu, "guard_bleu": guard}


def test_the_best_is_the_best_in_domain_score_within_the_drop_of_the_start():
    runs = [v(5.0, 30.0), v(3.0, 29.5), v(2.0, 28.9), v(2.5, 29.0), v(1.0, 20.0)]
    assert best_of(runs, best_metric="loss", bleu_drop=1.0) == 3  # 2.0 and 1.0 lost more than 1 BLEU
    assert best_of(runs, best_metric="loss", bleu_drop=1.1) == 2
    assert best_of(runs, best_metric="loss", bleu_drop=100.0) == 4  # no guard: the best loss
    assert best_of(runs, best_metric="loss", bleu_drop=0.0) == 0  # nothing may be lost: the start
    bleu = [v(9, 30.0, 10.0), v(9, 29.0, 25.0), v(9, 28.0, 40.0), v(9, 29.5, 25.0)]
    assert best_of(bleu, best_metric="bleu", bleu_drop=1.0) == 1  # a tie keeps the earlier
    assert admits(29.0, start=30.0, bleu_drop=1.0) and not admits(28.99, start=30.0, bleu_drop=1.0)
    assert best_of([], best_metric="loss", bleu_drop=1.0) is None


def scripted(monkeypatch, scores: list[dict]) -> list[int]:
    """Trainer.validate returns the next of ``scores``; returns the updates it was called at."""
    calls: list[int] = []

    def validate(self):
        calls.append(self.progress.update)
        return {**scores[len(calls) - 1], "nll": 1.0, "ppl": 1.0}

    monkeypatch.setattr(Trainer, "validate", validate)
    return calls


def test_a_guarded_run_validates_its_start_and_keeps_the_guarded_best(
    tiny_data, finished_tiny_run, tmp_path, monkeypatch
):
    scores = [v(5.0, 30.0), v(3.0, 29.5), v(2.0, 28.0), v(2.5, 29.2), v(1.0, 20.0), v(2.4, 29.1)]
    calls = scripted(monkeypatch, scores)
    run = tmp_path / "ft"
    init = finished_tiny_run / "checkpoints" / "step_00000002"
    argv = ["train", str(tiny_data), "--out", str(run), "--init", str(init), *TINY]
    argv += ["--guard-valid", str(tiny_data), "--train.valid_every_steps=1", "--train.patience=3"]
    assert main([*argv, "--train.max_steps=3"]) == 0
    assert calls == [0, 1, 2, 3]  # update 0: the model the run starts from
    assert main([*argv, "--train.max_steps=5", "--resume", "auto"]) == 0
    assert calls == [0, 1, 2, 3, 4, 5]  # resumed: the start is not validated again
    best = json.loads((run / "checkpoints" / "best" / "trainer_state.json").read_text())
    assert best["update"] == best_of(scores, best_metric="loss", bleu_drop=1.0) == 5
    assert best["guard_start"] == 30.0
    log = (run / "train.log").read_text()
    assert (
        "valid update 2: loss 2, bleu 0, guard_bleu 28, nll 1, ppl 1 (better, but its guard BLEU is more"
        in log
    )
    assert json.loads((run / "config.json").read_text())["guard"] == {
        "valid": [str(tiny_data.resolve())],
        "bleu_drop": 1.0,
        "sentences": 40,
    }


def test_the_guard_scores_the_real_model_at_every_validation(tiny_data, finished_tiny_run, tmp_path):
    run = tmp_path / "ft"
    text = tiny_data.parent / "text"
    init = finished_tiny_run / "checkpoints" / "step_00000002"
    argv = ["train", str(tiny_data), "--out", str(run), "--init", str(init), *TINY]
    argv += ["--guard-valid", str(text / "test.en"), str(text / "test.de"), "--guard-bleu-drop", "0.5"]
    assert main([*argv, "--train.valid_every_steps=2", "--train.max_steps=2"]) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r.get("split") == "valid"]
    assert [r["update"] for r in valid] == [0, 2] and all(r["guard_bleu"] >= 0 for r in valid)
    state = json.loads((run / "checkpoints" / "step_00000002" / "trainer_state.json").read_text())
    assert state["guard_start"] == valid[0]["guard_bleu"]


def test_a_guard_set_is_a_prepared_directory_or_two_text_files(tiny_data, tmp_path, capsys):
    from train_fixtures import prepare_tiny

    text = tiny_data.parent / "text"
    files = open_guard([str(text / "valid.en"), str(text / "valid.de")], bleu_drop=1.0, data_dir=tiny_data)
    directory = open_guard([str(tiny_data)], bleu_drop=1.0, data_dir=tiny_data)
    assert files.sources == directory.sources and files.references == directory.references
    other = prepare_tiny(tmp_path / "other", vocab_size=100)
    with pytest.raises(Exception, match="pieces, but"):
        open_guard([str(other)], bleu_drop=1.0, data_dir=tiny_data)
    with pytest.raises(Exception, match="must be >= 0"):
        open_guard([str(tiny_data)], bleu_drop=-1.0, data_dir=tiny_data)
    scratch = ["train", str(tiny_data), "--out", str(tmp_path / "s"), *TINY, "--guard-valid", str(tiny_data)]
    assert main([*scratch, "--train.max_steps=1"]) == 2
    assert "only with --init" in capsys.readouterr().err and not Path(tmp_path / "s").exists()
