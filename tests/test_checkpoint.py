"""nmt/checkpoint.py: tampered checkpoint files are CheckpointErrors naming the file (nothing from a
checkpoint is executed, nothing is allocated for an absurd configuration), `best` and old checkpoints
are replaced / deleted without a moment where a partial one is listed, stale temporaries are cleaned,
a full disk keeps the previous checkpoint."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from train_fixtures import repo_env, tiny_args

from nmt import checkpoint as ckpt
from nmt.cli import main
from nmt.infer.translate import Translator

REPO = Path(__file__).resolve().parents[1]
TINY = tiny_args("--train.max_tokens=512")


def train(data, out, *extra):
    assert main(["train", str(data), "--out", str(out), *TINY, *extra]) == 0


@pytest.fixture
def step_checkpoint_copy(finished_tiny_run, tmp_path) -> Path:
    """This test's own copy of the last step checkpoint of ``finished_tiny_run``."""
    target = tmp_path / "ckpt"
    shutil.copytree(ckpt.list_step_checkpoints(finished_tiny_run)[-1], target)
    return target


def rewrite_manifest(directory: Path) -> None:
    """What an attacker or a buggy tool does: make MANIFEST.json match the altered files."""
    manifest = {}
    for f in sorted(directory.iterdir()):
        if f.name != ckpt.MANIFEST:
            data = f.read_bytes()
            manifest[f.name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (directory / ckpt.MANIFEST).write_text(json.dumps(manifest))


class Payload:
    """Unpickling this runs os.system: it must never happen on load."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def pickle_as_safetensors(path: Path, marker: Path) -> None:
    torch.save({"weights": Payload(marker)}, path)


def huge_header(path: Path, marker: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(struct.pack("<Q", 1 << 40) + data[8:])


def huge_offsets(path: Path, marker: Path) -> None:
    n = struct.unpack("<Q", path.read_bytes()[:8])[0]
    header = json.loads(path.read_bytes()[8 : 8 + n])
    name = next(k for k in header if k != "__metadata__")
    header[name]["data_offsets"] = [0, 1 << 40]
    text = json.dumps(header).encode()
    text += b" " * (n - len(text)) if len(text) <= n else b""
    path.write_bytes(struct.pack("<Q", len(text)) + text + path.read_bytes()[8 + n :])


def wrong_shape(path: Path, marker: Path) -> None:
    from safetensors.torch import load_file

    state = load_file(str(path))
    name = next(k for k in state if state[k].dim() == 2)
    state[name] = torch.zeros(3, 5)
    save_file(state, str(path))


def nan_weights(path: Path, marker: Path) -> None:
    from safetensors.torch import load_file

    state = load_file(str(path))
    name = next(k for k in state if state[k].dim() == 2)
    state[name][0, 0] = float("nan")
    save_file(state, str(path))


def garbage(path: Path, marker: Path) -> None:
    path.write_bytes(b"this is not a sentencepiece model\n" * 10)


def huge_config(path: Path, marker: Path) -> None:
    config = json.loads(path.read_text())
    config["model"]["d_model"] = 10**9
    path.write_text(json.dumps(config))


def bad_config(path: Path, marker: Path) -> None:
    config = json.loads(path.read_text())
    config["model"]["n_heads"] = -4
    path.write_text(json.dumps(config))


@pytest.mark.parametrize(
    "name,tamper,message",
    [
        ("model.safetensors", pickle_as_safetensors, "not a safetensors file"),
        ("model.safetensors", huge_header, "header claims 1099511627776 bytes"),
        ("model.safetensors", huge_offsets, "data offsets [0, 1099511627776] outside"),
        ("model.safetensors", wrong_shape, "has shape [3, 5], the model configuration expects"),
        ("model.safetensors", nan_weights, "holds NaN or infinite values"),
        ("spm.model", garbage, "not a readable SentencePiece model"),
        ("config.json", bad_config, "model.n_heads=-4: must be a positive integer"),
    ],
)
def test_malformed_checkpoint_files_are_checkpoint_errors(
    step_checkpoint_copy, tmp_path, name, tamper, message
):
    """Each tampered file (NaN weights included), with a matching manifest, is a CheckpointError
    naming the file and what is wrong; nothing in it is executed."""
    marker = tmp_path / "pwned"
    tamper(step_checkpoint_copy / name, marker)
    rewrite_manifest(step_checkpoint_copy)
    with pytest.raises(ckpt.CheckpointError) as e:
        Translator.load(step_checkpoint_copy, device="cpu", precision="fp32")
    assert str(step_checkpoint_copy / name) in str(e.value) and message in str(e.value)
    assert not marker.exists()


def test_no_checkpoint_code_is_executed_on_load_or_resume(finished_tiny_run, tiny_data, tmp_path, capsys):
    """Pickles in place of every tensor file never run, on load, resume or average."""
    work = tmp_path / "run"
    shutil.copytree(finished_tiny_run, work)
    marker = tmp_path / "pwned"
    for d in [*ckpt.list_step_checkpoints(work), work / "checkpoints" / "best"]:
        for name in ("model.safetensors", "optimizer.safetensors"):
            pickle_as_safetensors(d / name, marker)
        rewrite_manifest(d)
    with pytest.raises(ckpt.CheckpointError, match="not a safetensors file"):
        ckpt.load_model(work)
    assert main(["train", str(tiny_data), "--out", str(work), "--resume", "--train.max_steps=3"]) == 2
    assert main(["average", str(work), "--last", "2", "--out", str(tmp_path / "avg")]) == 2
    err = capsys.readouterr().err
    assert err.count("not a safetensors file") == 2 and "Traceback" not in err
    assert not marker.exists() and not (tmp_path / "avg").exists()
    # the payload is live: unpickling it (what nmt never does) runs it
    with open(work / "checkpoints" / "best" / "model.safetensors", "rb") as f:
        assert torch.load(f, weights_only=False) == {"weights": 0}
    assert marker.exists()


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_parameter_bytes_counted_on_the_meta_device_are_those_of_the_model(positional):
    """The size check's count (the model built on the meta device, its initialization skipped, the
    sinusoidal table a shape) is the float32 bytes of the real model's parameters and buffers."""
    import dataclasses

    from nmt.config import tiny
    from nmt.model import Transformer

    cfg = dataclasses.replace(tiny(100), positional=positional)
    model = Transformer(cfg)
    tensors = [*model.parameters(), *model.buffers()]
    assert ckpt.parameter_bytes(cfg) == sum(4 * t.numel() for t in tensors)


def test_huge_config_fails_before_allocating(step_checkpoint_copy):
    """d_model=10^9 (32 TB of weights) is refused from the configuration alone."""
    huge_config(step_checkpoint_copy / "config.json", None)
    rewrite_manifest(step_checkpoint_copy)
    import resource

    def limit_memory():  # on the code before the fix, allocation fails fast instead of filling the machine
        resource.setrlimit(resource.RLIMIT_DATA, (3 << 30, 3 << 30))

    proc = subprocess.run(
        [sys.executable, "-m", "nmt", "translate", str(step_checkpoint_copy)],
        input="a house\n",
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit_memory,
        env=repo_env(),
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nmt translate: error:") and "config.json" in lines[0]
    assert "GiB for its parameters, more than the" in lines[0]
    assert "Traceback" not in proc.stderr


LOAD = "import sys; from nmt import checkpoint as c; c.load_model(sys.argv[1])"


def test_symlink_to_dev_zero_is_refused_not_read(step_checkpoint_copy):
    """A manifest matching a symlink to /dev/zero (size 0, sha256 of nothing) is refused, not read
    (for ever)."""
    target = step_checkpoint_copy / "model.safetensors"
    target.unlink()
    target.symlink_to("/dev/zero")
    manifest = json.loads((step_checkpoint_copy / ckpt.MANIFEST).read_text())
    manifest["model.safetensors"] = {"sha256": hashlib.sha256(b"").hexdigest(), "bytes": 0}
    (step_checkpoint_copy / ckpt.MANIFEST).write_text(json.dumps(manifest))
    proc = subprocess.run(
        [sys.executable, "-c", LOAD, str(step_checkpoint_copy)],
        capture_output=True,
        text=True,
        timeout=60,
        env=repo_env(),
    )
    assert "CheckpointError" in proc.stderr and "model.safetensors: a symlink" in proc.stderr


@pytest.mark.parametrize(
    "manifest,message",
    [
        ({}, "empty or not a mapping"),
        ([], "empty or not a mapping"),
        ({"spm.model": None}, "does not list model.safetensors"),
    ],
)
def test_empty_or_partial_manifest_is_an_error(step_checkpoint_copy, manifest, message):
    """A MANIFEST.json that lists nothing (or not every file) does not verify."""
    (step_checkpoint_copy / ckpt.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ckpt.CheckpointError, match=message):
        ckpt.load_model(step_checkpoint_copy)


def test_best_survives_a_failure_while_it_is_replaced(tiny_data, tmp_path, monkeypatch):
    """An error (or kill) while `best` is replaced leaves a best: it is not deleted before the new
    one is in place."""
    from nmt.train.trainer import Trainer

    losses = iter([3.0, 2.0])
    monkeypatch.setattr(Trainer, "validate", lambda self: {"loss": next(losses)})
    real_rename = os.rename

    def rename(src, dst):
        if Path(dst).name == "best" and Path(src).name != "ckpt":  # not the old best coming back
            raise OSError(5, "Input/output error")  # the new best cannot be put in place
        return real_rename(src, dst)

    run = tmp_path / "run"
    train(tiny_data, run, "--train.max_steps=1", "--train.valid_every_steps=1")
    monkeypatch.setattr(os, "rename", rename)
    main(["train", str(tiny_data), "--out", str(run), "--resume", "--train.max_steps=2"])
    monkeypatch.setattr(os, "rename", real_rename)
    best = ckpt.resolve_checkpoint(run)
    assert json.loads((best / "trainer_state.json").read_text())["update"] == 1  # the previous best
    ckpt.verify(best)


def test_best_set_aside_by_a_kill_is_restored(finished_tiny_run, tmp_path):
    """Killed between the two renames, the old best is found aside and put back."""
    work = tmp_path / "run"
    shutil.copytree(finished_tiny_run, work)
    folder = work / "checkpoints"
    (folder / ".best.old-abc").mkdir()
    os.rename(folder / "best", folder / ".best.old-abc" / "ckpt")
    assert ckpt.resolve_checkpoint(work) == folder / ".best.old-abc" / "ckpt"
    removed = ckpt.clean_stale(folder)
    assert (folder / "best" / ckpt.MANIFEST).exists() and not (folder / ".best.old-abc").exists()
    assert removed[0] == ".best.old-abc (restored as best)"


def test_dead_code_is_gone(tmp_path):
    """No unreachable `checkpoint_avg` fallback, no ignored `final` argument."""
    import inspect

    from nmt.train.trainer import Trainer

    (tmp_path / "checkpoint_avg").mkdir()
    (tmp_path / "checkpoint_avg" / ckpt.MANIFEST).write_text("{}")
    with pytest.raises(ckpt.CheckpointError, match="not a checkpoint directory"):
        ckpt.resolve_checkpoint(tmp_path)
    assert list(inspect.signature(Trainer.validate_and_keep_best).parameters) == ["self"]


def test_stale_temporaries_are_removed_at_start(finished_tiny_run, tiny_data, tmp_path):
    """`.step_N.tmp-*`, `.best.tmp`, `.*.deleting-*` of a killed run are removed on resume,
    and a killed `nmt prepare`'s `.OUT.tmp-PID` when prepare runs again."""
    work = tmp_path / "run"
    shutil.copytree(finished_tiny_run, work)
    folder = work / "checkpoints"
    for name in (".step_00000003.tmp-x1y2", ".best.tmp", ".step_00000001.deleting-77"):
        (folder / name).mkdir()
        (folder / name / "model.safetensors").write_bytes(b"x" * 100)
    assert main(["train", str(tiny_data), "--out", str(work), "--resume", "--train.max_steps=3"]) == 0
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]
    assert "removed stale temporaries" in (work / "train.log").read_text()

    from train_fixtures import write_corpus

    splits = write_corpus(tmp_path / "text", n_train=60, n_valid=5)
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f".data.tmp-{dead.pid}"
    stale.mkdir()
    assert (
        main(
            [
                "prepare",
                "files",
                "--src",
                "en",
                "--tgt",
                "de",
                "--out",
                str(tmp_path / "data"),
                "--train",
                *map(str, splits["train"]),
                "--vocab-size",
                "60",
                "--threads",
                "1",
            ]
        )
        == 0
    )
    assert not stale.exists()


def test_kill_while_deleting_old_checkpoint_never_lists_a_partial_one(tiny_data, tmp_path, monkeypatch):
    """Old checkpoints are renamed aside before deletion: a kill during the deletion never leaves a
    directory with a MANIFEST but no weights listed as complete."""
    run = tmp_path / "run"
    real_rmtree = shutil.rmtree

    def killed_rmtree(path, *args, **kwargs):
        path = Path(path)
        if (path / "model.safetensors").exists() and (path / "trainer_state.json").exists():
            (path / "model.safetensors").unlink()  # the deletion got this far, then SIGKILL
            raise KeyboardInterrupt
        return real_rmtree(path, *args, **kwargs)

    train(tiny_data, run, "--train.max_steps=3", "--train.save_every_steps=1", "--train.keep_last=3")
    monkeypatch.setattr(shutil, "rmtree", killed_rmtree)
    try:  # KeyboardInterrupt: one line and status 130, as for Ctrl-C
        assert (
            main(
                [
                    "train",
                    str(tiny_data),
                    "--out",
                    str(run),
                    "--resume",
                    "--train.max_steps=4",
                    "--train.keep_last=3",
                ]
            )
            == 130
        )
    except KeyboardInterrupt:  # escaped nmt's handling: fail this test, not the session
        pytest.fail("KeyboardInterrupt escaped `nmt train`")
    monkeypatch.setattr(shutil, "rmtree", real_rmtree)
    listed = ckpt.list_step_checkpoints(run)
    assert [p.name for p in listed] == ["step_00000002", "step_00000003", "step_00000004"]
    for directory in listed:
        ckpt.verify(directory)


def test_full_disk_during_checkpoint_write_is_a_clean_error(tiny_data, tmp_path, monkeypatch, capsys):
    """A full disk inside safetensors (a SafetensorError, not an OSError) is one line, exit 2, the
    previous checkpoint intact, no temporary left."""
    from safetensors import SafetensorError

    run = tmp_path / "run"
    train(tiny_data, run, "--train.max_steps=1")

    def full_disk(tensors, filename, metadata=None):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(ckpt, "save_file", full_disk)
    capsys.readouterr()
    assert main(["train", str(tiny_data), "--out", str(run), "--resume", "--train.max_steps=2"]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("nmt train: error: could not write checkpoint")
    assert [p.name for p in ckpt.list_step_checkpoints(run)] == ["step_00000001"]
    ckpt.verify(ckpt.list_step_checkpoints(run)[0])
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]


FILE_LIMIT = """
import resource, signal, sys
from nmt.cli import main
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG, as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))
sys.exit(main(sys.argv[1:]))
"""


def test_real_write_error_inside_safetensors_is_a_clean_error(tiny_data, tmp_path):
    """A real OS write error inside safetensors (files limited to 20 kB) during a checkpoint."""
    run = tmp_path / "run"
    train(tiny_data, run, "--train.max_steps=1")
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            FILE_LIMIT,
            "train",
            str(tiny_data),
            "--out",
            str(run),
            "--resume",
            "--train.max_steps=2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=repo_env(OMP_NUM_THREADS="1"),
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("nmt train: error: could not write checkpoint") and "(os error 27)" in last
    assert [p.name for p in ckpt.list_step_checkpoints(run)] == ["step_00000001"]
    ckpt.verify(ckpt.list_step_checkpoints(run)[0])
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]


def test_copy_to_best_fsyncs_every_copied_file(finished_tiny_run, tmp_path, monkeypatch):
    """`copy_checkpoint` fsyncs every copied file before it renames the copy into place."""
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(
        os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd))[1]
    )
    source = ckpt.list_step_checkpoints(finished_tiny_run)[-1]
    ckpt.copy_checkpoint(source, tmp_path / "best")
    names = {Path(p).name for p in synced if ".best.tmp-" in p}
    assert names >= {f.name for f in source.iterdir()}


def test_the_target_sides_model_beside_spm_model_is_saved_with_it(tiny_checkpoint, tmp_path):
    """save(spm_model=FILE) also takes the target_spm.model beside FILE (a DATA_DIR's or a checkpoint's:
    an imported Marian model's target side, which fine-tuned, averaged and shrunk checkpoints keep),
    listed in MANIFEST.json; without one beside it the checkpoint has none."""
    model, config = ckpt.load_model(tiny_checkpoint)
    data = tmp_path / "data"
    data.mkdir()
    shutil.copyfile(tiny_checkpoint / "spm.model", data / "spm.model")
    ckpt.save(tmp_path / "one", model=model, config=config, spm_model=data / "spm.model")
    assert sorted(ckpt.verify(tmp_path / "one")) == ["config.json", "model.safetensors", "spm.model"]
    shutil.copyfile(tiny_checkpoint / "spm.model", data / "target_spm.model")
    ckpt.save(tmp_path / "two", model=model, config=config, spm_model=data / "spm.model")
    assert "target_spm.model" in ckpt.verify(tmp_path / "two")
    assert (tmp_path / "two" / "target_spm.model").read_bytes() == (data / "target_spm.model").read_bytes()
