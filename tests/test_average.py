"""nmt/train/average.py and `nmt average`: checkpoint averaging (section 6.1), its --out never the run's own
checkpoints, a full disk an error naming --out."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file
from train_fixtures import tiny_args

from nmt import checkpoint as ckpt
from nmt.cli import main

TINY = tiny_args("--train.log_every_steps=1")


def train(data, out, *extra):
    assert main(["train", str(data), "--out", str(out), *TINY, *extra]) == 0


# ----------------------------------------------------------------------------- nmt average --out
def test_average_out_refuses_existing_dir_and_the_run(finished_run_copy, tmp_path, capsys):
    """--out is refused for an existing directory and for the run itself (none of them is deleted)."""
    before = sorted(str(p.relative_to(finished_run_copy)) for p in finished_run_copy.rglob("*"))
    for out in (
        finished_run_copy,
        finished_run_copy.parent,
        finished_run_copy / "checkpoints",
        finished_run_copy / "checkpoints" / "best",
    ):
        assert main(["average", str(finished_run_copy), "--last", "2", "--out", str(out), "--force"]) == 2
    err = capsys.readouterr().err
    assert err.count("is the run directory") == 2 and err.count("holds the run's own checkpoints") == 2
    assert sorted(str(p.relative_to(finished_run_copy)) for p in finished_run_copy.rglob("*")) == before
    other = tmp_path / "precious"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    assert main(["average", str(finished_run_copy), "--last", "2", "--out", str(other)]) == 2
    assert "already exists; pass --force" in capsys.readouterr().err
    assert main(["average", str(finished_run_copy), "--last", "2", "--out", str(other), "--force"]) == 2
    assert "is not a checkpoint directory" in capsys.readouterr().err
    assert (other / "notes.txt").read_text() == "keep me"
    avg = tmp_path / "avg"
    assert main(["average", str(finished_run_copy), "--last", "2", "--out", str(avg)]) == 0
    assert main(["average", str(finished_run_copy), "--last", "1", "--out", str(avg)]) == 2
    assert main(["average", str(finished_run_copy), "--last", "1", "--out", str(avg), "--force"]) == 0
    assert json.loads((avg / "config.json").read_text())["averaged_from"] == ["step_00000002"]


def test_average_on_a_full_disk_is_an_error_naming_out_and_keeps_the_old_average(
    finished_run_copy, tmp_path, monkeypatch, capsys
):
    """A disk that fills (or a read-only --out) while the average is written: exit 2 with one line
    naming --out, not an internal error; the average --force was replacing is intact."""
    import errno

    avg = tmp_path / "avg"
    assert main(["average", str(finished_run_copy), "--last", "2", "--out", str(avg)]) == 0
    capsys.readouterr()
    before = {p.name: p.read_bytes() for p in avg.iterdir()}

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt, "save_file", full_disk)
    assert main(["average", str(finished_run_copy), "--last", "1", "--out", str(avg), "--force"]) == 2
    err = capsys.readouterr().err
    assert f"nmt average: error: --out {avg}: could not write the averaged checkpoint: No space left" in err
    assert {p.name: p.read_bytes() for p in avg.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".avg")] == []


def test_average_of_a_checkpoint_directory_says_it_needs_the_run_directory(finished_run_copy, capsys):
    """`nmt average RUN/checkpoints/step_N` (or RUN/checkpoints): the error says that the argument is
    a checkpoint (or the checkpoints folder) and names the run directory to give, not '0 checkpoints'."""
    step = finished_run_copy / "checkpoints" / "step_00000002"
    for given in (step, finished_run_copy / "checkpoints"):
        assert (
            main(["average", str(given), "--last", "2", "--out", str(finished_run_copy.parent / "avg")]) == 2
        )
        err = capsys.readouterr().err
        assert (
            f"nmt average: error: {given}: " in err and f"give the run directory {finished_run_copy}" in err
        )


def test_average_is_elementwise_mean(tiny_data, tmp_path):
    run = tmp_path / "run"
    train(tiny_data, run, "--train.max_steps=6", "--train.save_every_steps=2", "--train.max_tokens=512")
    steps = ckpt.list_step_checkpoints(run)
    assert [p.name for p in steps] == ["step_00000002", "step_00000004", "step_00000006"]
    assert main(["average", str(run), "--last", "3", "--out", str(tmp_path / "avg")]) == 0
    avg = load_file(str(tmp_path / "avg" / "model.safetensors"))
    states = [load_file(str(p / "model.safetensors")) for p in steps]
    for k, v in avg.items():
        mean = (states[0][k].double() + states[1][k].double() + states[2][k].double()) / 3
        assert torch.equal(v, mean.float()), k  # the mean, rounded once to float32
    ckpt.load_model(tmp_path / "avg")
    assert main(["average", str(run), "--last", "4", "--out", str(tmp_path / "x")]) == 2
