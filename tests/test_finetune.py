"""Fine-tuning (`nmt train --init CHECKPOINT`) and early stopping (`train.patience`)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from train_fixtures import tiny_args

from nmt import checkpoint as ckpt
from nmt.cli import main
from nmt.train.trainer import Start, Trainer

TINY = tiny_args("--train.log_every_steps=1", "--train.max_tokens=512", "--train.accum_steps=1")


def train(*argv) -> int:
    return main(["train", *map(str, argv)])


@pytest.fixture(scope="module")
def parent(tiny_data, tmp_path_factory) -> Path:
    """A tiny trained run to start from: its step checkpoints 6 and 8 (optimizer state included)."""
    run = tmp_path_factory.mktemp("parent") / "run"
    assert (
        train(
            tiny_data,
            "--out",
            run,
            *TINY,
            "--train.max_steps=8",
            "--train.save_every_steps=2",
            "--train.keep_last=2",
        )
        == 0
    )
    return run


def test_init_starts_from_the_checkpoint_weights_with_a_new_optimizer_and_step(tiny_data, parent, tmp_path):
    from nmt.train.command import init_configs
    from nmt.train.finetune import open_init

    source = parent / "checkpoints" / "step_00000008"
    init = open_init(source)
    model_cfg, train_cfg, meta = init_configs(
        tiny_data, init, preset_name=None, config_file=None, overrides={"train": {"max_steps": "4"}}
    )
    trainer = Trainer(
        tiny_data, tmp_path / "ft", model_cfg, train_cfg, meta, Start(init=init), progress=False
    )
    try:
        expected = ckpt.load_state(source)
        actual = ckpt.unique_state_dict(trainer.model)
        assert expected.keys() == actual.keys()
        for name in expected:
            assert torch.equal(expected[name], actual[name]), name
        assert trainer.progress.update == 0 and trainer.optimizer.state_dict()["state"] == {}
    finally:
        trainer.release(remove_empty=True)


def test_init_records_its_checkpoint_and_keeps_the_optimizer_on_request(tiny_data, parent, tmp_path):
    source = parent / "checkpoints" / "step_00000008"
    out = tmp_path / "ft"
    assert (
        train(
            tiny_data,
            "--out",
            out,
            *TINY[:1],
            "tiny",
            "--init",
            source,
            "--init-optimizer",
            "--train.max_steps=2",
            "--train.save_every_steps=2",
            "--train.num_threads=1",
        )
        == 0
    )
    record = json.loads((out / "config.json").read_text())["init"]
    assert record == {
        "path": str(source.resolve()),
        "keep_optimizer": True,
        "sha256": hashlib.sha256((source / "model.safetensors").read_bytes()).hexdigest(),
    }
    # the model's configuration is the checkpoint's, not the tiny preset's defaults
    assert json.loads((out / "config.json").read_text())["model"] == ckpt.read_config(source)["model"]
    assert "initialised from" in (out / "train.log").read_text()
    # two updates after the parent's 8: Adam's step counters went on from 8 (state kept), to 10
    state = load_file(str(out / "checkpoints" / "step_00000002" / "optimizer.safetensors"))
    steps = {float(v) for k, v in state.items() if k.endswith(".step")}
    assert steps == {10.0}


def test_init_refuses_a_model_change_and_accepts_a_dropout(tiny_data, parent, tmp_path, capsys):
    source = parent / "checkpoints" / "step_00000008"
    assert (
        train(
            tiny_data, "--out", tmp_path / "a", "--init", source, "--model.d_model=64", "--train.max_steps=1"
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "--model.d_model=64: fine-tuning keeps the model of" in err and "d_model=32" in err
    assert not (tmp_path / "a").exists()
    assert (
        train(
            tiny_data,
            "--out",
            tmp_path / "b",
            "--init",
            source,
            "--model.dropout=0.3",
            "--train.max_steps=1",
            "--train.save_every_minutes=0",
            "--train.num_threads=1",
        )
        == 0
    )
    assert json.loads((tmp_path / "b" / "config.json").read_text())["model"]["dropout"] == 0.3


def test_init_refuses_data_with_another_vocabulary(parent, tmp_path, capsys):
    from train_fixtures import prepare_tiny

    other = prepare_tiny(tmp_path / "other", vocab_size=100)
    assert train(other, "--out", tmp_path / "ft", "--init", parent, "--train.max_steps=1") == 2
    err = capsys.readouterr().err
    assert "pieces, but" in err or "id " in err
    assert "--spm-model" in err and not (tmp_path / "ft").exists()


def test_init_optimizer_needs_a_checkpoint_that_has_one(tiny_data, parent, tmp_path, capsys):
    averaged = tmp_path / "avg"
    assert main(["average", str(parent), "--last", "2", "--out", str(averaged)]) == 0
    assert (
        train(
            tiny_data, "--out", tmp_path / "ft", "--init", averaged, "--init-optimizer", "--train.max_steps=1"
        )
        == 2
    )
    assert "holds no optimizer state" in capsys.readouterr().err


def test_a_fine_tuning_run_resumes_exactly(tiny_data, parent, tmp_path):
    common = [
        "--init",
        parent / "checkpoints" / "step_00000008",
        *TINY[2:],
        "--preset",
        "tiny",
        "--train.save_every_steps=3",
    ]
    assert train(tiny_data, "--out", tmp_path / "straight", *common, "--train.max_steps=6") == 0
    assert train(tiny_data, "--out", tmp_path / "cut", *common, "--train.max_steps=3") == 0
    # the same command again with --resume (and --init, as a scheduler re-runs it): from step 3,
    # not the parent
    assert (
        train(tiny_data, "--out", tmp_path / "cut", *common, "--train.max_steps=6", "--resume", "auto") == 0
    )
    a = load_file(str(tmp_path / "straight" / "checkpoints" / "step_00000006" / "model.safetensors"))
    b = load_file(str(tmp_path / "cut" / "checkpoints" / "step_00000006" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert "resumed from" in (tmp_path / "cut" / "train.log").read_text()


def test_resume_with_another_init_is_refused(tiny_data, parent, tmp_path, capsys):
    run = tmp_path / "ft"
    common = [*TINY[2:], "--preset", "tiny", "--train.save_every_steps=1", "--train.max_steps=1"]
    assert train(tiny_data, "--out", run, "--init", parent / "checkpoints" / "step_00000008", *common) == 0
    assert (
        train(
            tiny_data,
            "--out",
            run,
            "--init",
            parent / "checkpoints" / "step_00000006",
            *common,
            "--resume",
            "auto",
        )
        == 2
    )
    assert "the run being resumed started from" in capsys.readouterr().err


# ----------------------------------------------------------------------------- early stopping
def scripted_validation(monkeypatch, losses: list[float]) -> list[int]:
    """Trainer.validate returns the next of ``losses``; returns the steps it was called at."""
    calls: list[int] = []

    def validate(self):
        calls.append(self.progress.update)
        loss = losses[len(calls) - 1]
        return {"loss": loss, "nll": loss, "ppl": 1.0}

    monkeypatch.setattr(Trainer, "validate", validate)
    return calls


def test_patience_stops_after_n_validations_without_improvement(tiny_data, tmp_path, monkeypatch):
    calls = scripted_validation(monkeypatch, [5.0, 4.0, 4.5, 4.2, 3.0, 2.0])
    run = tmp_path / "run"
    assert (
        train(
            tiny_data,
            "--out",
            run,
            *TINY,
            "--train.valid_every_steps=1",
            "--train.patience=2",
            "--train.max_steps=50",
        )
        == 0
    )
    assert calls == [1, 2, 3, 4]  # 4.5 and 4.2 do not beat 4.0: stop at the second of them
    log = (run / "train.log").read_text()
    assert (
        "early stopping: 2 validations without a better valid loss (train.patience=2); the best is update 2"
        in log
    )
    assert "stopped (patience) at update 4" in log
    assert json.loads((run / "checkpoints" / "best" / "trainer_state.json").read_text())["update"] == 2


def test_patience_off_trains_to_the_limit(tiny_data, tmp_path, monkeypatch):
    calls = scripted_validation(monkeypatch, [5.0, 6.0, 7.0, 8.0, 9.0])
    assert (
        train(
            tiny_data, "--out", tmp_path / "run", *TINY, "--train.valid_every_steps=1", "--train.max_steps=5"
        )
        == 0
    )
    assert calls == [1, 2, 3, 4, 5]


def test_resume_keeps_the_count_of_validations_without_improvement(tiny_data, tmp_path, monkeypatch):
    calls = scripted_validation(monkeypatch, [5.0, 6.0, 7.0, 8.0, 9.0])
    run = tmp_path / "run"
    common = [*TINY, "--train.valid_every_steps=1", "--train.patience=3"]
    assert train(tiny_data, "--out", run, *common, "--train.max_steps=3") == 0  # 2 without improvement
    resume = ["--train.valid_every_steps=1", "--train.patience=3", "--train.max_steps=50", "--resume"]
    assert train(tiny_data, "--out", run, *resume) == 0
    assert calls == [1, 2, 3, 4]  # the third bad validation after the resume stops it
    assert "stopped (patience) at update 4" in (run / "train.log").read_text()
    # and a run that stopped for patience resumes to nothing
    assert train(tiny_data, "--out", run, *resume) == 0
    assert calls == [1, 2, 3, 4]
    assert "already finished at update 4 (patience=3" in (run / "train.log").read_text()


def test_init_from_a_checkpoint_with_a_target_model_needs_data_prepared_with_it_and_keeps_it(
    imported_marian, tmp_path, capsys
):
    """A checkpoint with its own target_spm.model (an imported Marian model): data prepared with
    `--spm-model CHECKPOINT` holds it (its targets segmented with it) and fine-tunes, and the run's
    checkpoints keep it byte for byte; data with the same spm.model but without it (targets
    segmented as sources) is refused, naming both and the cure, before any training."""
    from data_fixtures import parse, write
    from import_fixtures import SENTENCES, TARGETS

    from nmt.data import command as data_command

    _, model = imported_marian
    files = [str(write(tmp_path / "t.en", SENTENCES[:60])), str(write(tmp_path / "t.de", TARGETS[:60]))]
    argv = ["files", "--src", "en", "--tgt", "de", "--threads", "1", "--train", *files, "--valid", *files]
    assert (
        data_command.run_prepare(parse([*argv, "--out", str(tmp_path / "d"), "--spm-model", str(model)])) == 0
    )
    plain = tmp_path / "plain"
    shutil.copytree(tmp_path / "d", plain)
    (plain / "target_spm.model").unlink()
    assert train(plain, "--out", tmp_path / "refused", "--init", model, "--train.max_steps=1") == 2
    err = capsys.readouterr().err
    assert f"no target_spm.model) is not that of {model} ({model / 'target_spm.model'})" in err
    assert f"--spm-model {model}" in err and not (tmp_path / "refused").exists()
    run = tmp_path / "ft"
    options = [a for a in TINY if a.startswith("--train.")]  # the model is the checkpoint's
    assert train(tmp_path / "d", "--out", run, "--init", model, *options, "--train.max_steps=1") == 0
    last = ckpt.resolve_checkpoint(run)
    assert (last / "target_spm.model").read_bytes() == (model / "target_spm.model").read_bytes()
