"""nmt/train/trainer.py, the training loop: exact resume, crash-safe checkpoints, DDP equivalence, errors,
end to end."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from train_fixtures import repo_env, tiny_args

from nmt import checkpoint as ckpt
from nmt.cli import main
from nmt.config import TrainConfig
from nmt.data.batching import TokenBatchSampler
from nmt.data.dataset import ParallelDataset

REPO = Path(__file__).resolve().parents[1]
TINY = tiny_args("--train.log_every_steps=1")


def train(data, out, *extra):
    assert main(["train", str(data), "--out", str(out), *TINY, *extra]) == 0


def batches_per_epoch(data, max_tokens, replicas=1):
    ds = ParallelDataset.load(data, "train")
    return len(
        TokenBatchSampler(
            src_lengths=ds.src_lengths,
            tgt_lengths=ds.tgt_lengths,
            max_tokens=max_tokens,
            seed=1,
            num_replicas=replicas,
        ).batches(0)
    )


def assert_same_tensors(a: Path, b: Path):
    ta, tb = load_file(str(a)), load_file(str(b))
    assert ta.keys() == tb.keys()
    for k in ta:
        assert torch.equal(ta[k], tb[k]), k


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_resume_is_exact(tiny_data, tmp_path, precision):
    """Stopped mid-epoch and resumed, a run ends with the weights, Adam state, data position and RNG
    states of the run that never stopped, bit for bit. bf16 is the default precision where the CPU
    runs it fast (`auto`: avx512_bf16 or AMX) and is asked for by name here so that every CPU takes
    its path (emulated elsewhere): autocast, the explicit attention of nmt/explicit_attention.py
    and the 16-bit dropout masks (the tiny model's P_drop 0.1) must all resume exactly too."""
    per_epoch = batches_per_epoch(tiny_data, 512)
    n = per_epoch // 2 + 3  # the interruption is mid-epoch and the second half crosses an epoch boundary
    common = [
        "--train.max_tokens=512",
        "--train.accum_steps=1",
        f"--train.save_every_steps={n}",
        f"--train.precision={precision}",
    ]
    train(tiny_data, tmp_path / "straight", *common, f"--train.max_steps={2 * n}")
    train(tiny_data, tmp_path / "stopped", *common, f"--train.max_steps={n}")
    state = json.loads(
        (ckpt.list_step_checkpoints(tmp_path / "stopped")[-1] / "trainer_state.json").read_text()
    )
    assert state["epoch"] == 0 and 0 < state["position"] < per_epoch  # really mid-epoch
    assert (
        main(
            [
                "train",
                str(tiny_data),
                "--out",
                str(tmp_path / "stopped"),
                "--resume",
                f"--train.max_steps={2 * n}",
            ]
        )
        == 0
    )
    a = ckpt.list_step_checkpoints(tmp_path / "straight")[-1]
    b = ckpt.list_step_checkpoints(tmp_path / "stopped")[-1]
    assert a.name == b.name == f"step_{2 * n:08d}"
    assert_same_tensors(a / "model.safetensors", b / "model.safetensors")
    assert_same_tensors(a / "optimizer.safetensors", b / "optimizer.safetensors")
    sa, sb = (json.loads((d / "trainer_state.json").read_text()) for d in (a, b))
    assert (sa["epoch"], sa["position"], sa["rng"]) == (sb["epoch"], sb["position"], sb["rng"]) and sa[
        "epoch"
    ] == 1


def test_linear_decay_follows_its_formula_and_resumes_exactly(tiny_data, tmp_path):
    """train.decay_fraction=0.5 of max_steps=20: eq. 3 for 10 updates, then eq. 3 times (21 - s) / 10;
    a run resumed inside the decay ends bit-identical to the straight one."""
    from nmt.train.optim import inverse_sqrt_lr

    common = [
        "--train.max_tokens=512",
        "--train.accum_steps=1",
        "--train.save_every_steps=7",
        "--train.max_steps=20",
        "--train.decay_fraction=0.5",
        "--train.keep_last=5",
    ]
    train(tiny_data, tmp_path / "straight", *common)
    records = [
        json.loads(line) for line in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()
    ]
    lrs = {r["update"]: r["lr"] for r in records if r["split"] == "train"}
    assert sorted(lrs) == list(range(1, 21))
    for s, lr in lrs.items():
        eq3 = inverse_sqrt_lr(s, d_model=32, warmup_steps=10)
        assert lr == pytest.approx(eq3 * (1 if s <= 10 else (21 - s) / 10), rel=1e-12), s
    state = json.loads(
        (tmp_path / "straight" / "checkpoints" / "step_00000014" / "trainer_state.json").read_text()
    )
    assert (state["decay_start"], state["decay_end"]) == (10, 20)
    # resume from the checkpoint of update 14, inside the decay (as after a kill there)
    resumed = tmp_path / "resumed"
    shutil.copytree(tmp_path / "straight", resumed)
    for later in ("step_00000020", "best"):
        shutil.rmtree(resumed / "checkpoints" / later, ignore_errors=True)
    assert main(["train", str(tiny_data), "--out", str(resumed), "--resume"]) == 0
    a, b = (ckpt.list_step_checkpoints(tmp_path / d)[-1] for d in ("straight", "resumed"))
    assert a.name == b.name == "step_00000020"
    assert_same_tensors(a / "model.safetensors", b / "model.safetensors")
    assert_same_tensors(a / "optimizer.safetensors", b / "optimizer.safetensors")


def test_tiny_end_to_end_loss_goes_down(tiny_data, tmp_path):
    run = tmp_path / "run"
    train(
        tiny_data,
        run,
        "--train.max_steps=50",
        "--train.max_tokens=1024",
        "--train.accum_steps=1",
        "--train.valid_every_steps=25",
        "--train.lr_scale=0.1",
    )
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_losses = [r["loss"] for r in records if r["split"] == "train"]
    valid = [r for r in records if r["split"] == "valid"]
    assert len(train_losses) == 50 and len(valid) == 2
    assert sum(train_losses[-5:]) / 5 < 0.7 * sum(train_losses[:5]) / 5
    assert valid[1]["loss"] < valid[0]["loss"]
    model, config = ckpt.load_model(run)  # the run directory resolves to its best checkpoint
    assert config["model"]["d_model"] == 32 and (ckpt.resolve_checkpoint(run) / "spm.model").exists()
    assert main(["plot", str(run)]) == 0 and (run / "loss.png").stat().st_size > 1000


def test_validation_bleu_picks_best(tiny_data, tmp_path):
    run = tmp_path / "run"
    train(
        tiny_data,
        run,
        "--train.max_steps=4",
        "--train.valid_every_steps=2",
        "--train.valid_bleu=true",
        "--train.best_metric=bleu",
        "--train.valid_bleu_max_sentences=10",
        "--train.max_tokens=512",
    )
    valid = [
        json.loads(line)
        for line in (run / "metrics.jsonl").read_text().splitlines()
        if json.loads(line)["split"] == "valid"
    ]
    assert [r["update"] for r in valid] == [2, 4] and all(0 <= r["bleu"] <= 100 for r in valid)
    assert "BLEU|" in valid[0]["bleu_signature"] or "nrefs" in valid[0]["bleu_signature"]
    best = json.loads((run / "checkpoints" / "best" / "trainer_state.json").read_text())
    assert best["update"] == max(valid, key=lambda r: (r["bleu"], -r["update"]))["update"]
    assert best["best_metric"] == "bleu" and best["best"] == max(r["bleu"] for r in valid)  # BLEU itself


def test_errors(tiny_data, tmp_path, capsys):
    assert main(["train", str(tmp_path), "--out", str(tmp_path / "r"), *TINY]) == 2
    assert "is not a prepared data directory" in capsys.readouterr().err
    assert (
        main(
            [
                "train",
                str(tiny_data),
                "--out",
                str(tmp_path / "r"),
                *TINY,
                "--model.src_vocab_size=99",
                "--model.tgt_vocab_size=99",
            ]
        )
        == 2
    )
    assert "do not match the vocabulary" in capsys.readouterr().err
    train(tiny_data, tmp_path / "r", "--train.max_steps=1")
    assert main(["train", str(tiny_data), "--out", str(tmp_path / "r"), *TINY, "--train.max_steps=2"]) == 2
    assert "already holds a run; use --resume" in capsys.readouterr().err


def test_no_disk_space_keeps_previous_checkpoint(tiny_data, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    train(tiny_data, run, "--train.max_steps=2", "--train.save_every_steps=1", "--train.max_tokens=512")
    import nmt.checkpoint as module

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(module, "save_file", full_disk)
    assert main(["train", str(tiny_data), "--out", str(run), "--resume", "--train.max_steps=3"]) == 2
    assert "No space left on device" in capsys.readouterr().err
    last = ckpt.list_step_checkpoints(run)[-1]
    assert last.name == "step_00000002"
    ckpt.verify(last)
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]  # no half-written dirs


def test_diverged_training_stops_before_saving_nan_weights(tiny_data, tmp_path, capsys):
    """A loss that turns NaN or infinite (here: lr_scale 1e30) stops the run at that update with
    exit 2; it went on writing NaN checkpoints that nmt refuses to load (and keep_last deleted the
    good ones). The checkpoints written before it are intact and load."""
    run = tmp_path / "run"
    argv = ["train", str(tiny_data), "--out", str(run), *TINY, "--train.max_steps=8"]
    argv += ["--train.save_every_steps=1", "--train.keep_last=2", "--train.lr_scale=1e30"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "nmt train: error: training diverged at update " in err and "the checkpoints written before" in err
    steps = ckpt.list_step_checkpoints(run)
    assert steps and steps[-1].name < "step_00000008"
    for step in steps:
        ckpt.load_model(step)  # finite weights: every checkpoint loads


def test_out_of_memory_is_one_line_suggesting_a_smaller_max_tokens(tiny_data, tmp_path, monkeypatch, capsys):
    """An allocation that fails (CUDA out of memory, simulated here) ends `nmt train` with exit 2 and
    one line naming train.max_tokens and a smaller value; it was an internal error (exit 1)."""
    from nmt.train.trainer import Trainer

    def out_of_memory(self, micro, total_tokens):
        raise torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB"
        )

    monkeypatch.setattr(Trainer, "train_step", out_of_memory)
    argv = ["train", str(tiny_data), "--out", str(tmp_path / "run"), *TINY, "--train.max_tokens=1024"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "nmt train: error: out of memory at update 1 (CUDA out of memory): train.max_tokens=1024 padded "
        "tokens per micro-batch do not fit; rerun with a smaller --train.max_tokens (e.g. 512: the update "
        "keeps ~1024 target tokens by accumulation); the checkpoints written are intact (docs/gpu.md)"
    )


def test_corrupt_checkpoint_is_named(tiny_data, tmp_path):
    run = tmp_path / "run"
    train(tiny_data, run, "--train.max_steps=1")
    path = ckpt.list_step_checkpoints(run)[-1] / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    with pytest.raises(ckpt.CheckpointError, match="model.safetensors: size"):
        ckpt.load_model(path.parent)
    path.write_bytes(data[:-10] + b"0123456789")
    with pytest.raises(ckpt.CheckpointError, match="model.safetensors: sha256 mismatch"):
        ckpt.load_model(path.parent)


KILLER = """
import ctypes, os, signal, sys, torch
from nmt import checkpoint as ckpt
from nmt.config import ModelConfig
from nmt.model import Transformer
cfg = ModelConfig(src_vocab_size=20000, tgt_vocab_size=20000, n_layers=2, d_model=256, d_ff=1024)
model = Transformer(cfg)
for out in sys.argv[1:]:  # a writer forked for each directory, one after the other, until it is killed
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        continue
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (Linux): no writer outlives its parent
    ckpt.save(out + "/step_00000001", model=model, config={"model": model.cfg.__dict__}, spm_model=None)
    print("ready", os.getpid(), flush=True)
    i = 2
    while True:
        ckpt.save(out + f"/step_{i:08d}", model=model, config={"model": model.cfg.__dict__}, spm_model=None,
                  optimizer_tensors={"m": torch.randn(4_000_000)})
        i += 1
os._exit(0)  # every writer reaped: no interpreter teardown to wait for
"""


def test_sigkill_while_writing_leaves_previous_checkpoint(tmp_path):
    """A writer SIGKILLed 0.05, 0.3 and 0.7 s after its first checkpoint, wherever it is in the next
    ones: every directory that looks complete verifies and loads. (One process imports torch and builds
    the model; each writer is a fork of it, and the next starts once the last is dead.)"""
    env = repo_env(OMP_NUM_THREADS="1")  # one thread: safe to fork
    delays = (0.05, 0.3, 0.7)
    outs = [tmp_path / f"k{delay}" / "checkpoints" for delay in delays]
    for out in outs:
        out.mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-c", KILLER, *map(str, outs)], stdout=subprocess.PIPE, env=env)
    try:
        for delay in delays:
            ready, pid = proc.stdout.readline().split()
            assert ready == b"ready"
            time.sleep(delay)
            os.kill(int(pid), signal.SIGKILL)
        assert proc.wait(timeout=60) == 0  # each writer reaped, the last one too
    finally:
        if proc.poll() is None:
            proc.kill()  # and with it the writer it forked last
            proc.wait()
    for out in outs:
        complete = ckpt.list_step_checkpoints(out.parent)
        assert complete and complete[0].name == "step_00000001"
        for directory in complete:  # every directory that looks complete verifies and loads
            model, _ = ckpt.load_model(directory)


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
def test_ddp_two_processes_match_one(tiny_data, tmp_path):
    max_tokens = next(m for m in range(384, 1024, 16) if batches_per_epoch(tiny_data, m) % 2 == 0)
    common = [
        *TINY,
        f"--train.max_tokens={max_tokens}",
        "--train.max_steps=4",
        "--model.dropout=0",
        "--train.save_every_steps=4",
        "--device",
        "cpu",
    ]  # gloo, also where there are GPUs
    env = repo_env(OMP_NUM_THREADS="1")
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            f"--master_port={port}",
            "-m",
            "nmt",
            "train",
            str(tiny_data),
            "--out",
            str(tmp_path / "ddp"),
            *common,
            "--train.accum_steps=1",
        ],
        env=env,
        timeout=240,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    train(tiny_data, tmp_path / "single", *common, "--train.accum_steps=2")
    curves = []
    for name in ("ddp", "single"):
        records = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        curves.append([r["loss"] for r in records if r["split"] == "train"])
    assert len(curves[0]) == len(curves[1]) == 4
    for a, b in zip(*curves):
        assert abs(a - b) < 1e-5, curves
    wa = load_file(str(ckpt.list_step_checkpoints(tmp_path / "ddp")[-1] / "model.safetensors"))
    wb = load_file(str(ckpt.list_step_checkpoints(tmp_path / "single")[-1] / "model.safetensors"))
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=1e-5)


def test_target_dropout_replaces_decoder_inputs_while_training_only(tiny_data, tmp_path, monkeypatch):
    """train.target_dropout=0.5: about half of the decoder's input tokens (never BOS or PAD) are
    <unk> in training forwards; validation forwards see the target as it is."""
    from nmt.model import Transformer
    from nmt.vocab import BOS, PAD, UNK

    seen = []
    original = Transformer.forward

    def spy(self, src, tgt_in, *args, **kwargs):
        seen.append((self.training, tgt_in.clone()))
        return original(self, src, tgt_in, *args, **kwargs)

    monkeypatch.setattr(Transformer, "forward", spy)
    train(
        tiny_data,
        tmp_path / "run",
        "--train.max_steps=4",
        "--train.max_tokens=512",
        "--train.accum_steps=1",
        "--train.target_dropout=0.5",
        "--train.valid_every_steps=4",
    )
    training = [t for is_training, t in seen if is_training]
    evaluating = [t for is_training, t in seen if not is_training]
    assert len(training) == 4 and evaluating
    rest = lambda t: t[:, 1:][t[:, 1:].ne(PAD)]  # noqa: E731 (real tokens after BOS)
    assert all(t[:, 0].eq(BOS).all() for t in training + evaluating)
    dropped = torch.cat([rest(t) for t in training]).eq(UNK).float().mean().item()
    assert 0.4 < dropped < 0.6
    assert torch.cat([rest(t) for t in evaluating]).eq(UNK).float().mean().item() < 0.05
    assert (
        main(["train", str(tiny_data), "--out", str(tmp_path / "bad"), *TINY, "--train.target_dropout=1"])
        == 2
    )


def test_bpe_dropout_epochs_cycle_through_the_copies_and_resume_exactly(tmp_path, monkeypatch):
    """Data prepared with BPE-dropout: epoch e trains on copy e mod K (the usual segmentation
    with train.bpe_dropout=false), and an interrupted run resumes bit-identically across an
    epoch boundary (the next epoch's copy is taken from the saved position)."""
    from train_fixtures import prepare_tiny

    import nmt.train.run_data as run_data_module

    data = prepare_tiny(tmp_path / "bpe", bpe_dropout=0.2, bpe_dropout_copies=2)
    meta = json.loads((data / "meta.json").read_text())
    pairs = {
        name: {(s.tobytes(), t.tobytes()) for s, t in ParallelDataset(data, name, meta)}
        for name in ("train", "train.bpe1", "train.bpe2")
    }
    seen = []
    real_collate = run_data_module.collate
    monkeypatch.setattr(run_data_module, "collate", lambda ex: seen.append(ex) or real_collate(ex))

    def all_in(batches, name):  # every example of these batches is a pair of segmentation `name`
        return all((s.tobytes(), t.tobytes()) in pairs[name] for b in batches for s, t in b)

    copies = [ParallelDataset(data, name, meta) for name in ("train.bpe1", "train.bpe2")]
    sampler = TokenBatchSampler(
        src_lengths=[c.src_lengths for c in copies],
        tgt_lengths=[c.tgt_lengths for c in copies],
        max_tokens=512,
        seed=1,
    )
    _per_epoch = len(sampler.batches(0))
    common = ["--train.max_tokens=512", "--train.accum_steps=1"]
    train(data, tmp_path / "epochs", *common, "--train.max_epochs=3", "--train.max_steps=100000")
    ends = np.cumsum([len(sampler.batches(e)) for e in range(3)])  # then validation's batches
    epochs = [seen[0 : ends[0]], seen[ends[0] : ends[1]], seen[ends[1] : ends[2]]]
    assert (
        all_in(epochs[0], "train.bpe1")
        and all_in(epochs[1], "train.bpe2")
        and all_in(epochs[2], "train.bpe1")
    )
    assert not all_in(epochs[0], "train") and not all_in(epochs[1], "train.bpe1")  # really other pieces
    seen.clear()
    train(data, tmp_path / "usual", *common, "--train.max_steps=3", "--train.bpe_dropout=false")
    assert all_in(seen[:3], "train") and not all_in(seen[:3], "train.bpe1")  # then validation
    seen.clear()

    # stop in epoch 1 (copy 2), then run on into epoch 2 (copy 1 again)
    n, end = int(ends[0]) + 3, int(ends[1]) + 3
    train(data, tmp_path / "straight", *common, f"--train.max_steps={end}", f"--train.save_every_steps={end}")
    train(data, tmp_path / "stopped", *common, f"--train.max_steps={n}", f"--train.save_every_steps={n}")
    state = json.loads(
        (ckpt.list_step_checkpoints(tmp_path / "stopped")[-1] / "trainer_state.json").read_text()
    )
    assert (state["epoch"], state["position"]) == (1, 3)
    seen.clear()
    assert (
        main(["train", str(data), "--out", str(tmp_path / "stopped"), "--resume", f"--train.max_steps={end}"])
        == 0
    )
    rest = len(sampler.batches(1)) - 3  # epoch 1's batches after the resume, then 3 of epoch 2
    assert all_in(seen[:rest], "train.bpe2") and all_in(seen[rest : rest + 3], "train.bpe1")
    a = ckpt.list_step_checkpoints(tmp_path / "straight")[-1]
    b = ckpt.list_step_checkpoints(tmp_path / "stopped")[-1]
    assert a.name == b.name == f"step_{end:08d}"
    assert_same_tensors(a / "model.safetensors", b / "model.safetensors")
    assert_same_tensors(a / "optimizer.safetensors", b / "optimizer.safetensors")


# ----------------------------------------------------------------------------- a finished run
def test_resume_of_a_finished_run_does_nothing_and_says_so(tiny_data, finished_run_copy, capsys):
    """--resume of a run at max_steps trains nothing (not step 3 of 2) and says so."""
    before = (finished_run_copy / "metrics.jsonl").read_text()
    assert main(["train", str(tiny_data), "--out", str(finished_run_copy), "--resume"]) == 0
    assert "the run already finished at update 2 (max_steps=2); nothing to do" in capsys.readouterr().err
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
