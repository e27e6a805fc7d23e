"""Long validation pairs, the big preset, `nmt average --out`, stuck and finished run directories,
the resume position, options that would be silently ignored, the CLI's last line of defence
(--debug), and the run directory's lock, free space and data files."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from train_fixtures import tiny_args

from nmt import checkpoint as ckpt
from nmt.cli import main
from nmt.config import TrainConfig, train_preset

TINY = tiny_args("--train.max_tokens=512")


def train(data, out, *extra):
    return main(["train", str(data), "--out", str(out), *TINY, *extra])


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


# ----------------------------------------------------------------------------- long validation pairs
def test_prepare_warns_about_long_valid_pairs(long_valid_data):
    """prepare counts (and keeps) valid/test pairs longer than --max-len."""
    data, lines = long_valid_data
    meta = json.loads((data / "meta.json").read_text())
    assert meta["cleaning"]["valid"]["longer_than_max_len"] == 1
    assert meta["cleaning"]["test"]["longer_than_max_len"] == 0 and meta["splits"]["valid"]["pairs"] == 11
    assert [line for line in lines if line.startswith("warning:")] == [
        "warning: valid: 1 pairs have a side longer than --max-len 100 pieces (kept; validation and "
        "translation truncate them to the model's positions)"
    ]
    from nmt.data.prepare import format_report

    assert "longer than max len 1" in format_report(meta)


def test_long_validation_pair_is_truncated_with_one_warning(long_valid_data, tmp_path, capsys):
    """A 400-piece valid pair (longer than model.max_positions) is truncated by validation (loss and
    BLEU), with one warning, not an error at the first validation."""
    data, _ = long_valid_data
    assert (
        train(
            data,
            tmp_path / "run",
            "--train.max_steps=2",
            "--train.valid_every_steps=1",
            "--train.valid_bleu=true",
            "--train.valid_bleu_max_sentences=11",
            "--train.max_tokens=1024",
        )
        == 0
    )
    err = capsys.readouterr().err
    assert err.count("warning:") == 1
    assert (
        "warning: 1 of 11 valid pairs have a side longer than model.max_positions=256 (with EOS/BOS); "
        "validation truncates them"
    ) in err
    valid = [r for r in records(tmp_path / "run") if r["split"] == "valid"]
    assert [r["step"] for r in valid] == [1, 2] and all(r["loss"] > 0 and "bleu" in r for r in valid)


# ----------------------------------------------------------------------------- the big preset
def test_big_has_its_own_training_preset():
    """Section 5.2: base 100k steps, big 300k steps (3.5 days on 8 P100)."""
    assert train_preset("base").max_steps == 100_000
    big = train_preset("big")
    assert big.max_steps == 300_000
    assert {k: v for k, v in vars(big).items() if k != "max_steps"} == {
        k: v for k, v in vars(TrainConfig()).items() if k != "max_steps"
    }


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
    assert [(r["split"], r["step"]) for r in records(finished_run_copy)] == [
        ("train", 1),
        ("valid", 2),
    ]  # not twice
    assert "starting it again from step 0" in (finished_run_copy / "train.log").read_text()


def test_disk_check_counts_keep_last_and_leaves_no_stuck_run(tiny_data, tmp_path, monkeypatch, capsys):
    """The early disk check asks room for keep_last checkpoints (with best and one being written),
    not for one, and fails before it writes config.json, so that the directory is not stuck."""
    import nmt.train.run_dir as run_dir

    class Usage:
        free = 0

    run = tmp_path / "run"
    assert train(tiny_data, tmp_path / "probe", "--train.max_steps=1") == 0
    each = sum(
        f.stat().st_size
        for f in (ckpt.list_step_checkpoints(tmp_path / "probe")[0]).iterdir()
        if f.suffix == ".safetensors"
    )
    Usage.free = 4 * each  # room for 3 checkpoints, not for keep_last=10 + best + one being written
    monkeypatch.setattr(run_dir.shutil, "disk_usage", lambda path: Usage)
    assert train(tiny_data, run, "--train.max_steps=1", "--train.keep_last=10") == 2
    err = capsys.readouterr().err
    assert "keep_last=10 checkpoints" in err and "lower --train.keep_last" in err
    assert not (run / "config.json").exists()
    assert train(tiny_data, run, "--train.max_steps=1", "--train.keep_last=2") == 0


# ----------------------------------------------------------------------------- a finished run
def test_resume_of_a_finished_run_does_nothing_and_says_so(tiny_data, finished_run_copy, capsys):
    """--resume of a run at max_steps trains nothing (not step 3 of 2) and says so."""
    before = (finished_run_copy / "metrics.jsonl").read_text()
    assert main(["train", str(tiny_data), "--out", str(finished_run_copy), "--resume"]) == 0
    assert "the run already finished at step 2 (max_steps=2); nothing to do" in capsys.readouterr().err
    assert [p.name for p in ckpt.list_step_checkpoints(finished_run_copy)] == [
        "step_00000001",
        "step_00000002",
    ]
    assert (finished_run_copy / "metrics.jsonl").read_text() == before
    assert (
        main(["train", str(tiny_data), "--out", str(finished_run_copy), "--resume", "--train.max_steps=3"])
        == 0
    )
    assert ckpt.list_step_checkpoints(finished_run_copy)[-1].name == "step_00000003"


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


def test_trainer_resumes_the_samplers_own_state(tiny_data, finished_run_copy):
    """One concept, one place: the data position is the sampler's state_dict, not a parallel copy."""
    from nmt.config import ModelConfig, from_dict
    from nmt.data.dataset import load_meta
    from nmt.train.trainer import Start, Trainer

    saved = json.loads((finished_run_copy / "config.json").read_text())
    state = json.loads((ckpt.list_step_checkpoints(finished_run_copy)[-1] / "trainer_state.json").read_text())
    t = Trainer(
        tiny_data,
        finished_run_copy,
        from_dict(ModelConfig, saved["model"]),
        from_dict(TrainConfig, saved["train"], section="train"),
        load_meta(tiny_data),
        Start(resume=True),
    )
    assert state["position"] > 0
    assert t.sampler.state_dict() == {"epoch": state["epoch"], "position": state["position"]}
    t.sampler.set_epoch(5)
    assert (t.epoch, t.position) == (5, 0)


# ----------------------------------------------------------------------------- options that would be ignored
def test_misspelled_yaml_section_is_an_error(tiny_data, tmp_path, capsys):
    for section in ("modle", "trian"):
        path = tmp_path / f"{section}.yaml"
        path.write_text(f"{section}:\n  max_steps: 1\n")
        assert train(tiny_data, tmp_path / "r", "--config", str(path), "--train.max_steps=1") == 2
        assert f"{path}: unknown section '{section}'" in capsys.readouterr().err
        assert main(["model-info", "--config", str(path)]) == 2
        assert f"unknown section '{section}'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


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


@pytest.mark.parametrize(
    "argv,message",
    [
        (["average", "RUN", "--last", "0", "--out", "OUT"], "--last 0: must be a positive number"),
        (["average", "RUN", "--last", "-2", "--out", "OUT"], "--last -2: must be a positive number"),
        (["model-info", "--preset", "tiny", "--vocab-size", "0"], "0 must be a positive integer"),
    ],
)
def test_nonsense_counts_are_refused(finished_run_copy, tmp_path, capsys, argv, message):
    argv = [
        str(finished_run_copy) if a == "RUN" else str(tmp_path / "avg") if a == "OUT" else a for a in argv
    ]
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse: usage error, status 2
        rc = e.code
    assert rc == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "avg").exists()


# ----------------------------------------------------------------------------- the CLI's last resort
def test_unexpected_exception_is_one_line_unless_debug(monkeypatch, capsys):
    import nmt.cli

    def boom(args, overrides):
        raise RuntimeError("something nobody expected")

    monkeypatch.setattr(nmt.cli, "run_score", boom)
    assert main(["score", "hyp.txt", "--ref", "ref.txt"]) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "nmt score: internal error: RuntimeError: something nobody expected; this is a bug in nmt: please "
        "report it on the nmt issue tracker with the command line (rerun with --debug for the traceback)"
    ]
    for argv in (
        ["--debug", "score", "hyp.txt", "--ref", "ref.txt"],
        ["score", "hyp.txt", "--ref", "ref.txt", "--debug"],
    ):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert "Traceback (most recent call last)" in err and "RuntimeError: something nobody expected" in err


# ----------------------------------------------------------------------------- locks, disks, data
def test_finished_run_leaves_no_lock_and_a_dead_owners_lock_is_taken_over(tiny_data, tmp_path):
    """RUN/train.lock names its owner while a run lives; a killed owner's file
    (the kernel released its lock) does not block the next start."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.lock").write_text(
        json.dumps({"host": "elsewhere", "pid": 1, "started": "yesterday"}) + "\n"
    )
    assert train(tiny_data, run, "--train.max_steps=1") == 0
    assert not (run / "train.lock").exists()


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


def test_lock_without_flock_judges_the_owner_by_its_pid(tiny_data, tmp_path, monkeypatch, capsys):
    """On a file system without locks (flock fails), a lock file naming a live
    process of this host, or any process of another host, refuses the start (saying how to clear a
    stale lock) and changes nothing; one naming a dead process of this host is taken over."""
    import fcntl
    import socket
    import subprocess

    def no_locks(f, op):
        raise OSError(37, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    run, host = tmp_path / "run", socket.gethostname()
    run.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    for owner, refused in (
        ({"host": host, "pid": os.getppid()}, True),
        ({"host": "node7", "pid": 12}, True),
        ({"host": host, "pid": dead.pid}, False),
    ):
        text = json.dumps({**owner, "started": "2026-11-26 12:00:00"}) + "\n"
        (run / "train.lock").write_text(text)
        assert train(tiny_data, run, "--train.max_steps=1") == (2 if refused else 0)
        err = capsys.readouterr().err
        if refused:
            lock = run / "train.lock"
            assert err.strip() == (
                f"nmt train: error: {run} is in use by another `nmt train` (pid {owner['pid']} on host "
                f"{owner['host']} since 2026-11-26 12:00:00; lock file {lock}): wait for it to end, "
                "stop it, or "
                f"choose another --out; if that process no longer runs (its machine went down), the lock is "
                f"stale: delete {lock} and start again"
            )
            assert sorted(p.name for p in run.iterdir()) == ["train.lock"] and lock.read_text() == text
    assert ckpt.list_step_checkpoints(run) and not (run / "train.lock").exists()


def test_an_ignored_sigint_stays_ignored_while_training():
    """A script's background job ignores SIGINT (the recipes stop theirs with SIGTERM): the trainer
    does not make it answer Ctrl-C."""
    import signal

    from nmt.train.distributed import Preemption

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with Preemption():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_IGN, signal.SIG_DFL)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_free_space_is_checked_on_resume_too(tiny_data, finished_run_copy, monkeypatch, capsys):
    """The disk check runs on resume as on a fresh start; on resume the run's own checkpoints count
    as room (they are replaced, not added to)."""
    import nmt.train.run_dir as run_dir

    class Usage:
        free = 0

    monkeypatch.setattr(run_dir.shutil, "disk_usage", lambda path: Usage)
    before = sorted((str(p), p.stat().st_mtime_ns) for p in finished_run_copy.rglob("*"))
    argv = ["train", str(tiny_data), "--out", str(finished_run_copy), "--resume", "--train.max_steps=3"]
    assert main([*argv, "--train.keep_last=10"]) == 2
    err = capsys.readouterr().err
    assert (
        "keep_last=10 checkpoints" in err
        and "MB of them held already" in err
        and "lower --train.keep_last" in err
    )
    assert sorted((str(p), p.stat().st_mtime_ns) for p in finished_run_copy.rglob("*")) == before
    assert main([*argv, "--train.keep_last=1"]) == 0  # step_1, step_2 and best hold room for 1 + best + 1


def test_config_json_is_written_whole_or_not_at_all(tiny_data, finished_run_copy, capfd):
    """config.json is written whole or not at all: a full disk (here RLIMIT_FSIZE) does not leave it
    cut, on which `--resume auto` would fail for good."""
    import resource

    shutil.rmtree(finished_run_copy / "checkpoints")  # a start killed before its first checkpoint: restarted
    before = (finished_run_copy / "config.json").read_text()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) // 2, resource.RLIM_INFINITY))
            code = train(tiny_data, finished_run_copy, "--train.max_steps=2")
        finally:
            os._exit(code)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 2
    assert capfd.readouterr().err.strip().splitlines()[-1] == (
        f"nmt train: error: could not write {finished_run_copy / 'config.json'}: File too large (free some "
        "space, then "
        "start again)"
    )
    assert (finished_run_copy / "config.json").read_text() == before
    assert not [p.name for p in finished_run_copy.iterdir() if p.name.startswith(".")]


def test_truncated_data_file_is_an_error_naming_it(tiny_data, tmp_path, capsys):
    """A .bin file shorter than its offsets say is an error naming it, not silently short examples."""
    from nmt.data.dataset import ParallelDataset
    from nmt.data.download import DataError

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    path = data / "train.tgt.bin"
    size = path.stat().st_size
    path.write_bytes(path.read_bytes()[:-6])  # a copy cut short
    expected = (
        f"{path}: {size - 6} bytes, but train.tgt.offsets.npy ends at piece {size // 2} ({size} bytes of "
        "uint16): the data folder is truncated or altered; prepare it again"
    )
    with pytest.raises(DataError) as e:
        ParallelDataset.load(data, "train")
    assert str(e.value) == expected
    assert train(data, tmp_path / "run", "--train.max_steps=1") == 2
    assert capsys.readouterr().err.strip() == f"nmt train: error: {expected}"
    assert not (tmp_path / "run").exists()


def test_prepare_killed_inside_its_swap_gets_the_old_data_back(tmp_path):
    """A kill between prepare's two renames leaves OUT missing and the previous data under
    .OUT.old-*; the next `nmt prepare` puts it back first."""
    import signal

    from train_fixtures import write_corpus

    splits = write_corpus(tmp_path / "text", n_train=60, n_valid=5)
    out = tmp_path / "data"
    argv = [
        "prepare",
        "files",
        "--src",
        "en",
        "--tgt",
        "de",
        "--out",
        str(out),
        "--train",
        *map(str, splits["train"]),
        "--vocab-size",
        "60",
        "--threads",
        "1",
    ]
    assert main(argv) == 0
    meta = (out / "meta.json").read_text()
    pid = os.fork()
    if pid == 0:  # the second prepare is killed once the old data is aside, before the new is renamed
        real_rename = os.rename

        def rename(src, dst):
            if Path(dst) == out:
                os.kill(os.getpid(), signal.SIGKILL)
            return real_rename(src, dst)

        os.rename = rename
        try:
            main([*argv, "--force", "--seed", "2"])
        finally:
            os._exit(1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == -signal.SIGKILL
    assert not out.exists() and len(list(tmp_path.glob(".data.old-*/ckpt"))) == 1
    assert main(argv) == 2  # "already exists": the old data is back, not silently replaced
    assert (out / "meta.json").read_text() == meta
    assert not list(tmp_path.glob(".data.*"))


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
