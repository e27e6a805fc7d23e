"""nmt/train/run_data.py: a run's data (the train segmentations, the sampler, the valid split)."""

from __future__ import annotations

import json
from pathlib import Path

from train_fixtures import tiny_args

from nmt import checkpoint as ckpt
from nmt.cli import main

TINY = tiny_args("--train.max_tokens=512")


def train(data, out, *extra):
    return main(["train", str(data), "--out", str(out), *TINY, *extra])


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_empty_validation_split_trains_without_validation(tmp_path, capsys):
    """A valid split with 0 pairs (its files empty) is no valid split: the run trains and saves its
    checkpoints with one warning, instead of failing with ZeroDivisionError at the first validation."""
    from train_fixtures import write_corpus

    from nmt.data.prepare import PrepareOptions, prepare

    splits = write_corpus(tmp_path / "text", n_train=60, n_valid=5)
    for path in splits["valid"]:
        path.write_text("")
    options = PrepareOptions(dataset="files", src_lang="en", tgt_lang="de", vocab_size=60, threads=1)
    prepare(splits, tmp_path / "data", options=options, log=lambda *a: None)
    run = tmp_path / "run"
    assert train(tmp_path / "data", run, "--train.max_steps=2", "--train.valid_every_steps=1") == 0
    assert [p.name for p in ckpt.list_step_checkpoints(run)] == ["step_00000001", "step_00000002"]
    assert not (run / "checkpoints" / "best").exists()
    assert [r["split"] for r in records(run)] == ["train"]  # step 1; no valid record
    assert "warning: the valid split of" in capsys.readouterr().err
