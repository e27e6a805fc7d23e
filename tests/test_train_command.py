"""`nmt train` (nmt/train/command.py): its options checked against the run being resumed and its data,
nonsense options refused with one line naming them."""

from __future__ import annotations

import pytest
from train_fixtures import tiny_args

from nmt import checkpoint as ckpt
from nmt.cli import main

TINY = tiny_args("--train.max_tokens=512")


def train(data, out, *extra):
    return main(["train", str(data), "--out", str(out), *TINY, *extra])


# ----------------------------------------------------------------------------- resume position
def test_resume_on_data_of_another_vocabulary_is_refused(tiny_data, finished_run_copy, tmp_path, capsys):
    """--resume (and --resume auto) with a DATA prepared with another SentencePiece model of the same
    size trained on silently: the weights' ids meant other pieces (and the new checkpoints carried the
    new spm.model). Refused naming the first piece that differs; the run is left as it was."""
    from train_fixtures import write_corpus

    from nmt.data.prepare import PrepareOptions, prepare

    splits = write_corpus(tmp_path / "text", n_train=100, n_valid=5, seed=7)
    other = tmp_path / "other"
    prepare(
        splits,
        other,
        options=PrepareOptions(dataset="files", src_lang="en", tgt_lang="de", vocab_size=120, threads=1),
        log=lambda *a: None,
    )
    before = sorted(str(p.relative_to(finished_run_copy)) for p in finished_run_copy.rglob("*"))
    for resume in (["--resume"], ["--resume", "auto"]):
        argv = ["train", str(other), "--out", str(finished_run_copy), *resume, "--train.max_steps=4"]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"nmt train: error: {other / 'spm.model'}: id " in err
        assert f"{finished_run_copy / 'checkpoints' / 'step_00000002' / 'spm.model'}" in err
        assert f"resume with the data the run was trained on ({tiny_data})" in err
    assert sorted(str(p.relative_to(finished_run_copy)) for p in finished_run_copy.rglob("*")) == before
    assert (
        main(["train", str(tiny_data), "--out", str(finished_run_copy), "--resume", "--train.max_steps=3"])
        == 0
    )


def test_model_options_with_resume_are_checked_not_dropped(tiny_data, finished_run_copy, capsys):
    base = ["train", str(tiny_data), "--out", str(finished_run_copy), "--resume", "--train.max_steps=3"]
    assert main([*base, "--model.d_model=64"]) == 2
    assert "--model.d_model=64: the run being resumed has model.d_model=32" in capsys.readouterr().err
    assert main([*base, "--preset", "tiny"]) == 2
    assert "--preset cannot change it" in capsys.readouterr().err
    assert main([*base, "--config", str(finished_run_copy / "config.json")]) == 2
    assert "--config cannot change it" in capsys.readouterr().err
    assert ckpt.list_step_checkpoints(finished_run_copy)[-1].name == "step_00000002"
    assert main([*base, "--model.d_model=32"]) == 0  # the same value: nothing to change


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--train.clip_norm=-1"], "train.clip_norm=-1.0: must be >= 0"),
        (["--train.max_time=-5"], "train.max_time=-5.0: must be >= 0"),
        (["--train.weight_decay=nan"], "train.weight_decay=nan: must be >= 0"),
        (["--train.precision=fp16"], "precision='fp16' needs a CUDA device"),
        (["--device", "bogus"], "--device bogus: not a device"),
    ],
)
def test_nonsense_train_options_are_refused(tiny_data, tmp_path, capsys, argv, message):
    """Nonsense train options are one-line errors naming the option (fp16 on CPU too, not a ValueError
    traceback)."""
    import torch

    if "fp16" in message and torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert train(tiny_data, tmp_path / "r", "--train.max_steps=1", *argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("nmt train: error:") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()
