"""nmt/train/replay.py: general data replayed beside the user's while fine-tuning (`nmt train --init
CKPT --replay DIR --replay-share S`): the share of the target tokens, a new draw every epoch, the
vocabulary check, and an exact resume."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from train_fixtures import tiny_args, write_corpus

from nmt.cli import main
from nmt.train.replay import ReplaySampler, replay_tokens

TINY = tiny_args("--train.max_tokens=512", "--train.accum_steps=1")


@pytest.fixture(scope="module")
def general(tiny_data, tmp_path_factory) -> Path:
    """Other pairs prepared with tiny_data's vocabulary: the general data to replay."""
    from nmt.data.prepare import PrepareOptions, prepare

    folder = tmp_path_factory.mktemp("general")
    splits = write_corpus(folder / "text", n_train=300, n_valid=10, seed=5)
    options = PrepareOptions(
        dataset="files", src_lang="en", tgt_lang="de", threads=1, spm_model=str(tiny_data / "spm.model")
    )
    prepare(splits, folder / "data", options=options, log=lambda *a: None)
    return folder / "data"


def lengths(rng, n: int, low: int, high: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.integers(low, high, n), rng.integers(low, high, n)


def test_an_epoch_holds_every_user_pair_once_and_the_share_of_general_target_tokens():
    rng = np.random.default_rng(0)
    user, general = lengths(rng, 400, 3, 13), lengths(rng, 5000, 8, 30)
    sampler = ReplaySampler(user=user, general=general, share=0.2, max_tokens=256, seed=3)
    assert sampler.tokens == replay_tokens(0.2, user[1]) == round(0.25 * np.sum(user[1] + 1))
    for epoch in (0, 1):
        batches = sampler.batches(epoch)
        users = sorted(i for b in batches for i in b if i < 400)
        assert users == list(range(400))  # every user pair once
        tokens = {False: 0, True: 0}
        for b in batches:
            for i in b:
                is_general, j = sampler.locate(i, epoch)
                tokens[is_general] += int((general[1] if is_general else user[1])[j]) + 1
        assert abs(tokens[True] / (tokens[True] + tokens[False]) - 0.2) < 0.01
    assert not np.array_equal(sampler.drawn(0), sampler.drawn(1))  # a new draw every epoch


def test_the_replay_sampler_resumes_from_its_epoch_and_position():
    rng = np.random.default_rng(1)
    user, general = lengths(rng, 300, 3, 13), lengths(rng, 900, 3, 13)
    straight = ReplaySampler(user=user, general=general, share=0.5, max_tokens=128, seed=2)
    straight.set_epoch(1)
    first = list(straight)
    cut = ReplaySampler(user=user, general=general, share=0.5, max_tokens=128, seed=2)
    cut.load_state_dict({"epoch": 1, "position": 5})
    assert list(cut) == first[5:] and cut.state_dict() == {"epoch": 1, "position": len(first)}
    # ranks split each epoch's batches: two ranks hold what one holds, none twice
    ranks = [
        ReplaySampler(user=user, general=general, share=0.5, max_tokens=128, seed=2, replicas=(2, r))
        for r in (0, 1)
    ]
    together = sorted(i for r in ranks for b in r.batches(1) for i in b)
    assert together == sorted(i for b in straight.batches(1) for i in b)


def test_a_run_replays_its_share_of_general_pairs(tiny_data, general, monkeypatch):
    """A run's micro-batches over one epoch (as the trainer takes them): the pairs from each source."""
    from nmt.config import TrainConfig
    from nmt.data.dataset import load_meta
    from nmt.train.distributed import Collectives
    from nmt.train.replay import open_replay
    from nmt.train.run_data import RunData

    cfg = TrainConfig(max_tokens=512, max_epochs=1, seed=1, update_tokens=3000)
    coll = Collectives(device=torch.device("cpu"), rank=0, world=1, active=False, timeout_minutes=1)
    replay = open_replay(general, 0.3, data_dir=tiny_data)
    data = RunData.load(tiny_data, load_meta(tiny_data), cfg, coll=coll, right_to_left=False, replay=replay)
    seen = {"user": 0, "general": 0}
    tokens = {"user": 0, "general": 0}
    original = RunData.locate

    def locate(self, train_set, i):
        dataset, j = original(self, train_set, i)
        side = "general" if dataset is self.general else "user"
        seen[side] += 1
        tokens[side] += len(dataset[j][1]) + 1
        return dataset, j

    monkeypatch.setattr(RunData, "locate", locate)
    batches = list(data.micro_batches(cfg))
    assert seen["user"] == 600 and seen["general"] == len(data.sampler.drawn(0))  # every user pair, the draw
    assert sum(b.n_tgt_tokens for b in batches) == tokens["user"] + tokens["general"]
    assert abs(tokens["general"] / (tokens["user"] + tokens["general"]) - 0.3) < 0.005
    # the accumulation count is of the joined batches' target tokens
    assert data.accumulation_steps(cfg, coll) == round(3000 / (sum(tokens.values()) / len(batches)))


def test_replay_needs_the_runs_vocabulary_and_init(tiny_data, finished_tiny_run, tmp_path, capsys):
    from train_fixtures import prepare_tiny

    other = prepare_tiny(tmp_path / "other", vocab_size=100)
    init = finished_tiny_run / "checkpoints" / "step_00000002"
    argv = ["train", str(tiny_data), "--out", str(tmp_path / "ft"), "--init", str(init), *TINY]
    assert main([*argv, "--replay", str(other), "--train.max_steps=1"]) == 2
    assert "--replay" in capsys.readouterr().err and not (tmp_path / "ft").exists()
    assert main([*argv, "--replay", str(tiny_data), "--replay-share", "1.0", "--train.max_steps=1"]) == 2
    assert "must be in (0, 1)" in capsys.readouterr().err
    scratch = ["train", str(tiny_data), "--out", str(tmp_path / "s"), *TINY, "--replay", str(tiny_data)]
    assert main([*scratch, "--train.max_steps=1"]) == 2
    assert "only with --init" in capsys.readouterr().err


def test_a_run_with_replay_records_it_and_resumes_exactly(
    tiny_data, general, finished_tiny_run, tmp_path, capsys
):
    init = finished_tiny_run / "checkpoints" / "step_00000002"
    common = ["--init", str(init), *TINY, "--replay", str(general), "--replay-share", "0.3"]
    common += ["--train.save_every_steps=3"]

    def train(out: str, *extra: str) -> int:
        return main(["train", str(tiny_data), "--out", str(tmp_path / out), *common, *extra])

    assert train("straight", "--train.max_steps=6") == 0
    assert train("cut", "--train.max_steps=3") == 0
    assert train("cut", "--train.max_steps=6", "--resume", "auto") == 0  # the same command, resumed
    a, b = (
        load_file(str(tmp_path / r / "checkpoints" / "step_00000006" / "model.safetensors"))
        for r in ("straight", "cut")
    )
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    record = json.loads((tmp_path / "cut" / "config.json").read_text())["replay"]
    assert record == {"path": str(general.resolve()), "share": 0.3}
    assert "replay: " in (tmp_path / "cut" / "train.log").read_text()
    capsys.readouterr()
    assert train("cut", "--train.max_steps=7", "--resume", "auto", "--replay-share", "0.5") == 2
    assert "--replay: the run being resumed has" in capsys.readouterr().err
