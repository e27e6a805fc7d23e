"""nmt/train/cpu_warning.py: the warning that a paper-sized model trains on the CPU, with the first update's
measured time projected to the run."""

from __future__ import annotations

import pytest
from train_fixtures import tiny_args

from nmt.cli import main

TINY = tiny_args("--train.log_every_steps=1")


def train(data, out, *extra):
    assert main(["train", str(data), "--out", str(out), *TINY, *extra]) == 0


@pytest.mark.parametrize("preset,warns", [(None, True), ("base", True), ("big", True), ("small", False)])
def test_a_paper_sized_model_on_the_cpu_warns_with_its_time_per_update_and_per_run(
    tiny_data, tmp_path, capsys, preset, warns
):
    """base and big (base is also the default without --preset) on the CPU: months of training, said
    in two lines with the measured time of the first update; small and tiny: no warning."""
    from nmt.train.command import build_configs
    from nmt.train.trainer import Trainer

    model_cfg, train_cfg, meta = build_configs(tiny_data, preset_name=preset, config_file=None, overrides={})
    trainer = Trainer(tiny_data, tmp_path / "run", model_cfg, train_cfg, meta, device="cpu")
    try:
        trainer.progress.update = 1
        trainer._warn_on_cpu(120.0, tokens=25_000)
    finally:
        trainer.release()
    err = capsys.readouterr().err
    steps, days = (300_000, 417) if preset == "big" else (100_000, 139)
    expected = (
        "warning: a paper-sized model on the CPU: update 1 took 2 min (25,000 target tokens); "
        f"{steps:,} updates to max_steps={steps:,} take ~{days} days.\n"
        "  Train it on GPUs (docs/gpu.md), or choose --preset small for a CPU (docs/training.md).\n"
    )
    assert (expected in err) == warns and ("paper-sized" in err) == warns


def test_the_cpu_warning_comes_after_the_first_update_once(tiny_data, tmp_path, monkeypatch, capsys):
    """The loop times its first update and warns once (tiny made "paper-sized" here); max_time bounds
    the projection."""
    from nmt.train import cpu_warning

    monkeypatch.setattr(cpu_warning, "PAPER_SIZED_LAYER_PARAMETERS", 0)
    train(tiny_data, tmp_path / "run", "--train.max_steps=3", "--train.max_time=0.000001")
    err = capsys.readouterr().err
    assert err.count("warning: a paper-sized model on the CPU: update 1 took ") == 1
    assert "3 updates to max_steps=3 take ~" in err and "but max_time=1e-06 min stops the run after ~" in err
