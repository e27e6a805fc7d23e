"""Multi-process training (CPU, gloo, 2 processes): one decision per update for the whole job, accumulation
from all shards, exact resume, SIGTERM / SIGKILL / `--resume auto`, multi-node rendezvous, collective
timeouts, and the device of every tensor handed to a collective (which pins the NCCL path without a GPU)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from conftest import tol
from safetensors.torch import load_file
from train_fixtures import repo_env, tiny_args

from nmt import checkpoint as ckpt
from nmt.cli import main
from nmt.train import distributed

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")

REPO = Path(__file__).resolve().parents[1]
# --device cpu: these tests pin the gloo path, also on a machine with GPUs (tests/test_cuda.py has nccl's)
TINY = [
    "--device",
    "cpu",
    *tiny_args("--train.log_every_steps=1", "--train.save_every_steps=0", "--train.keep_last=100"),
]
# tiny data at max_tokens=512: 11 batches per rank per epoch, and a per-shard mean of 427 / 454 target
# tokens, so a per-shard accumulation count would differ between the ranks (2 / 1 at update_tokens=1300)
UNEVEN = ["--train.max_tokens=512", "--train.update_tokens=1300"]
# the resume runs: 2 micro-batches per update (update_tokens=2200 over 2 ranks), updates cross epochs
RESUME = ["--train.max_tokens=512", "--train.update_tokens=2200"]
RESUME_STEPS = 24
# seconds a job may take before the test calls it hung: a job here takes about 10 s, and many times that
# on a loaded machine; no assertion depends on how long a job takes
HANG = 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(
    data, out, *extra, torchrun=("--nproc-per-node=2",), delay: str = "", pause: str = "", **popen
) -> subprocess.Popen:
    """``delay``, ``pause``: NMT_TEST_DELAY and NMT_TEST_PAUSE of tests/delayed_nmt.py."""
    env = repo_env(OMP_NUM_THREADS="1", NMT_TEST_DELAY=delay, NMT_TEST_PAUSE=pause)
    if "--rdzv-endpoint" not in " ".join(torchrun):
        torchrun = (*torchrun, f"--master-port={free_port()}")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *torchrun,
        str(REPO / "tests" / "delayed_nmt.py"),
        "train",
        str(data),
        "--out",
        str(out),
        *TINY,
        *extra,
    ]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen
    )
    LAUNCHED.append(proc)
    return proc


LAUNCHED: list[subprocess.Popen] = []


def kill_job(proc: subprocess.Popen) -> None:
    """SIGKILL a torchrun process and its workers (which torchrun starts in sessions of their own)."""
    for pid in (*worker_pids(proc.pid).values(), proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(autouse=True)
def no_job_outlives_its_test():
    yield
    while LAUNCHED:
        proc = LAUNCHED.pop()
        if proc.poll() is None:
            kill_job(proc)
            proc.communicate()


def torchrun(data, out, *extra, timeout: float = HANG, **kwargs) -> tuple[int, str]:
    proc = launch(data, out, *extra, **kwargs)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:  # the hang this file is about: fail, never wait forever
        kill_job(proc)
        output, _ = proc.communicate()
        pytest.fail(f"the job did not finish in {timeout} s (hang?):\n{output[-3000:]}")
    return proc.returncode, output


def state_of(directory: Path) -> dict:
    return json.loads((directory / "trainer_state.json").read_text())


def train_steps(run: Path) -> list[int]:
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    return [
        json.loads(line)["update"]
        for line in path.read_text().splitlines()
        if line.endswith("}") and json.loads(line)["split"] == "train"
    ]


def assert_identical(a: Path, b: Path) -> None:
    """Two checkpoints hold bit-identical weights, Adam moments, RNG states and data positions."""
    for name in ("model.safetensors", "optimizer.safetensors"):
        ta, tb = load_file(str(a / name)), load_file(str(b / name))
        assert ta.keys() == tb.keys()
        for k in ta:
            assert torch.equal(ta[k], tb[k]), (name, k)
    sa, sb = state_of(a), state_of(b)
    for key in ("update", "epoch", "position", "positions", "rng", "accum", "tokens_seen"):
        assert sa[key] == sb[key], key


# ----------------------------------------------------------------------------- limits and accumulation
@pytest.mark.parametrize("limit", ["max_time", "save_every_minutes"])
def test_time_limits_stop_cleanly_with_a_slow_rank(tiny_data, tmp_path, limit):
    """Rank 1 starts its clock 1.5 s late (and is slower per update): rank 0's clock decides for both."""
    run = tmp_path / "run"
    if limit == "max_time":  # 2.4 s of training, then stop with a final checkpoint
        extra, stop = ["--train.max_time=0.04", "--train.max_steps=100000"], "max_time"
    else:  # a checkpoint every 0.6 s of rank 0's clock, 30 updates of >= 0.05 s each
        extra, stop = ["--train.save_every_minutes=0.01", "--train.max_steps=30"], "max_steps"
    rc, out = torchrun(tiny_data, run, *UNEVEN, *extra, delay="1:1.5:0.05")
    assert rc == 0, out[-3000:]
    assert f"stopped ({stop}) at update" in out
    steps = ckpt.list_step_checkpoints(run)
    final = state_of(steps[-1])
    assert final["update"] == train_steps(run)[-1] and final["positions"][0] == final["positions"][1]
    if limit == "save_every_minutes":
        assert final["update"] == 30 and len(steps) >= 3, (
            out[-2000:],
            [p.name for p in steps],
        )  # saves + final


def test_max_epochs_with_uneven_shards_stops_together(tiny_data, tmp_path):
    """Shards whose mean batch sizes differ get one accumulation count (from all shards), so both ranks
    run out of data at the same update; the job stops at max_epochs with a final checkpoint."""
    run = tmp_path / "run"
    rc, out = torchrun(tiny_data, run, *UNEVEN, "--train.max_epochs=2", "--train.max_steps=0", delay="1:1.5")
    assert rc == 0, out[-3000:]
    assert "stopped (max_epochs) at update 22" in out  # 2 epochs x 11 batches per rank, 1 per update
    final = state_of(ckpt.list_step_checkpoints(run)[-1])
    assert final["update"] == 22 and final["accum"] == 1
    assert final["positions"] == [[2, 0], [2, 0]]  # every rank consumed exactly its shard, twice


# ----------------------------------------------------------------------------- validation, best, patience
def valid_records(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == "valid"]


def reference_valid_loss(data: Path, checkpoint: Path) -> float:
    """The label-smoothed loss per target token of the valid split under ``checkpoint``'s weights, in
    one process from the composite definition (nmt.train.loss.label_smoothed_nll_loss), not the
    trainer's fused one: what rank 0's validation must report for the whole split."""
    from nmt.data.batching import collate
    from nmt.data.dataset import ParallelDataset
    from nmt.train.loss import label_smoothed_nll_loss

    model, config = ckpt.load_model(checkpoint)
    model.eval()
    valid = ParallelDataset.load(data, "valid")
    loss_sum, tokens = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(valid), 16):
            batch = collate([valid[i] for i in range(start, min(start + 16, len(valid)))])
            loss, _, n = label_smoothed_nll_loss(
                model(batch.src, batch.tgt_in), batch.tgt_out, epsilon=config["train"]["label_smoothing"]
            )
            loss_sum, tokens = loss_sum + loss.item(), tokens + n
    return loss_sum / tokens


def test_two_processes_validate_the_whole_split_and_keep_the_best(tiny_data, tmp_path):
    """2 processes, a validation every 4 updates: rank 0 validates the whole valid split (its loss is
    the one-process loss of the same weights), the best checkpoint is the step of the lowest valid
    loss and holds that step's weights, and both ranks finish (no collective left waiting)."""
    run = tmp_path / "run"
    rc, out = torchrun(
        tiny_data, run, *UNEVEN, "--train.max_steps=12", "--train.valid_every_steps=4", timeout=120
    )
    assert rc == 0, out[-3000:]
    records = valid_records(run)
    assert [r["update"] for r in records] == [4, 8, 12]
    best = min(records, key=lambda r: r["loss"])
    assert state_of(run / "checkpoints" / "best")["update"] == best["update"]
    assert_identical(run / "checkpoints" / "best", run / "checkpoints" / f"step_{best['update']:08d}")
    # fp32 (TINY): the loss of the 680 valid tokens, summed in another order by another loss function
    # (fused against composite, batches of other sizes); |loss| ~ 4, each token's log_softmax over W
    # pieces after 2 x (d_model + d_ff) accumulations per layer
    for r in records:
        want = reference_valid_loss(tiny_data, run / "checkpoints" / f"step_{r['update']:08d}")
        assert r["loss"] == pytest.approx(want, abs=tol(torch.float32, 680 + 2 * 2 * (32 + 64), scale=4.0))


def test_two_processes_stop_together_on_patience(tiny_data, tmp_path):
    """Early stopping under 2 processes: with a learning rate too small to move any weight
    (lr_scale 1e-12: Adam's steps of ~1e-14 vanish in float32's rounding of weights ~0.1) every
    validation ties the first, so none is better: patience 2 stops both ranks at the third
    validation (rank 0 decides and broadcasts), exit 0, the best is the first."""
    run = tmp_path / "run"
    extra = [
        "--train.max_steps=40",
        "--train.valid_every_steps=4",
        "--train.patience=2",
        "--train.lr_scale=1e-12",
    ]
    rc, out = torchrun(tiny_data, run, *UNEVEN, *extra, timeout=120)
    assert rc == 0, out[-3000:]
    records = valid_records(run)
    assert [r["update"] for r in records] == [4, 8, 12] and len({r["loss"] for r in records}) == 1
    assert "early stopping: 2 validations without a better valid loss" in out
    assert "stopped (patience) at update 12" in out
    assert state_of(run / "checkpoints" / "best")["update"] == 4
    assert state_of(ckpt.list_step_checkpoints(run)[-1])["update"] == 12


# ----------------------------------------------------------------------------- exact resume, preemption
@pytest.fixture(scope="module")
def straight_final_checkpoint(tiny_data, tmp_path_factory) -> Path:
    """The uninterrupted 2-process run that the interrupted ones must reproduce bit for bit."""
    run = tmp_path_factory.mktemp("straight") / "run"
    rc, out = torchrun(tiny_data, run, *RESUME, f"--train.max_steps={RESUME_STEPS}")
    assert rc == 0, out[-3000:]
    final = ckpt.list_step_checkpoints(run)[-1]
    assert final.name == f"step_{RESUME_STEPS:08d}" and state_of(final)["accum"] == 2
    return final


def worker_pids(torchrun_pid: int) -> dict[int, int]:
    """{rank: pid} of the live workers of a torchrun process (Linux /proc)."""
    workers = {}
    try:
        for task in Path(f"/proc/{torchrun_pid}/task").iterdir():
            for pid in (task / "children").read_text().split():
                env = dict(
                    item.split("=", 1)
                    for item in Path(f"/proc/{pid}/environ").read_text(errors="replace").split("\0")
                    if "=" in item
                )
                if "RANK" in env:
                    workers[int(env["RANK"])] = int(pid)
    except (FileNotFoundError, ProcessLookupError, PermissionError):  # it has exited meanwhile
        pass
    return workers


def wait_for(condition, proc: subprocess.Popen, timeout: float = HANG) -> None:
    end = time.time() + timeout
    while not condition():
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.time() < end, "timed out waiting for the run to progress"
        time.sleep(0.05)


def test_sigterm_checkpoints_and_resume_auto_is_bit_identical(tiny_data, tmp_path, straight_final_checkpoint):
    """SIGTERM to rank 1 only, while rank 1 waits before update 6 (tests/delayed_nmt.py: no race with
    the training, whatever the load): rank 1 takes the signal, and the whole job ends update 6, writes
    checkpoint step_6 and stops together; `--resume auto` continues it bit for bit."""
    run, paused = tmp_path / "run", tmp_path / "paused"
    args = [*RESUME, f"--train.max_steps={RESUME_STEPS}", "--resume", "auto"]  # the scheduler's one command
    proc = launch(tiny_data, run, *args, pause=f"1:6:{paused}:signal")
    wait_for(paused.exists, proc)
    os.kill(worker_pids(proc.pid)[1], signal.SIGTERM)  # one rank is told: the whole job stops together
    out, _ = proc.communicate(timeout=HANG)
    assert proc.returncode == 0, out[-3000:]
    assert "rank 1: SIGTERM received before update 6" in out, out[-3000:]  # the signal landed there
    line = next(x for x in out.splitlines() if "preempted at update" in x)
    step = int(line.split("preempted at update ")[1].split()[0])
    assert 3 <= step < RESUME_STEPS
    assert step == 6 and line.endswith(
        "preempted at update 6 (SIGTERM): checkpoint written; continue with --resume auto"
    )
    assert ckpt.list_step_checkpoints(run)[-1].name == f"step_{step:08d}"
    assert train_steps(run) == list(range(1, 7))  # no update after the one the signal came in
    rc, out = torchrun(tiny_data, run, *args)
    assert rc == 0, out[-3000:]
    assert f"resumed from {run / 'checkpoints' / f'step_{step:08d}'}" in out
    assert_identical(straight_final_checkpoint, ckpt.list_step_checkpoints(run)[-1])


def test_sigkill_then_resume_auto_continues_exactly(tiny_data, tmp_path, straight_final_checkpoint):
    """SIGKILL to the whole job while rank 0 waits before update 8 (tests/delayed_nmt.py: no race with
    the training, whatever the load): checkpoints step_3 and step_6 are written, update 7 is logged
    but not checkpointed. `--resume auto` continues from step_6, logs update 7 once, and ends bit for
    bit as the uninterrupted run."""
    run, paused = tmp_path / "run", tmp_path / "paused"
    args = [*RESUME, f"--train.max_steps={RESUME_STEPS}", "--train.save_every_steps=3", "--resume", "auto"]
    proc = launch(tiny_data, run, *args, pause=f"0:8:{paused}:kill")
    wait_for(paused.exists, proc)
    assert [p.name for p in ckpt.list_step_checkpoints(run)] == ["step_00000003", "step_00000006"]
    assert train_steps(run) == list(range(1, 8))  # update 7: done and logged, then killed
    workers = worker_pids(proc.pid)
    kill_job(proc)  # the whole job, no warning
    proc.communicate()
    for pid in workers.values():  # reaped by init; wait until they are gone
        while Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text():
            time.sleep(0.01)
    killed_at = state_of(ckpt.list_step_checkpoints(run)[-1])["update"]
    assert killed_at < RESUME_STEPS and killed_at == 6
    rc, out = torchrun(tiny_data, run, *args)
    assert rc == 0, out[-3000:]
    assert f"resumed from {ckpt.list_step_checkpoints(run)[0].parent / f'step_{killed_at:08d}'}" in out
    assert_identical(straight_final_checkpoint, ckpt.list_step_checkpoints(run)[-1])
    assert train_steps(run) == list(range(1, RESUME_STEPS + 1))  # update 7's record dropped, then redone


def test_resume_auto_starts_fresh_and_resume_stays_strict(tiny_data, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", str(tiny_data), "--out", str(run), *TINY, "--train.max_steps=2", "--resume"]) == 2
    assert "has no complete checkpoint" in capsys.readouterr().err
    (run).mkdir()
    (run / "config.json").write_text("{}")  # a job killed before its first checkpoint
    assert (
        main(["train", str(tiny_data), "--out", str(run), *TINY, "--train.max_steps=2", "--resume", "auto"])
        == 0
    )
    assert (
        main(["train", str(tiny_data), "--out", str(run), *TINY, "--train.max_steps=3", "--resume", "auto"])
        == 0
    )
    assert "resumed from" in (run / "train.log").read_text()
    assert [p.name for p in ckpt.list_step_checkpoints(run)] == ["step_00000002", "step_00000003"]


def test_resume_with_another_world_size_is_refused(tiny_data, straight_final_checkpoint, capsys):
    run = straight_final_checkpoint.parent.parent  # the 2-process run, resumed by a single process
    assert (
        main(
            ["train", str(tiny_data), "--out", str(run), "--resume", f"--train.max_steps={RESUME_STEPS + 1}"]
        )
        == 2
    )
    assert "saved with 2 processes; resume with the same number (now 1)" in capsys.readouterr().err
    assert ckpt.list_step_checkpoints(run)[-1] == straight_final_checkpoint  # nothing written


# ----------------------------------------------------------------------------- multi-node, failures
def test_two_nodes_match_two_processes(tiny_data, tmp_path, straight_final_checkpoint):
    """Two torchrun invocations (--nnodes 2 --nproc-per-node 1, c10d rendezvous on 127.0.0.1) are the
    same job as one torchrun with 2 processes."""
    run = tmp_path / "run"
    port = free_port()
    rdzv = (
        "--nnodes=2",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        "--rdzv-id=nmt-test",
    )
    nodes = [
        launch(tiny_data, run, *RESUME, f"--train.max_steps={RESUME_STEPS}", torchrun=rdzv) for _ in range(2)
    ]
    outputs = [node.communicate(timeout=HANG)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
    assert_identical(straight_final_checkpoint, ckpt.list_step_checkpoints(run)[-1])


def test_collective_timeout_names_rank_and_update(tiny_data, tmp_path):
    """Rank 1 hangs before its first update (it sleeps for an hour, longer than the test may take): rank
    0 fails after train.collective_timeout (1.8 s, as gloo's message says), saying where. Without the
    timeout the job would hang (30 min by default) and fail the test at its bound."""
    rc, out = torchrun(
        tiny_data,
        tmp_path / "run",
        *UNEVEN,
        "--train.max_steps=5",
        "--train.collective_timeout=0.03",
        delay="1:3600",  # longer than HANG
        timeout=HANG,
    )
    assert rc != 0
    assert "nmt train: error: rank 0 of 2: the token count all-reduce failed at update 1" in out, out[-3000:]
    assert "train.collective_timeout=0.03 min" in out
    assert "Timed out waiting 1800ms" in out  # gloo's words: the timeout ended it, at 0.03 min, not 30


# ----------------------------------------------------------------------------- device placement (NCCL path)
@pytest.mark.parametrize(
    "device, local_rank, message",
    [
        (
            None,
            "1",
            "local rank 1 would train on cuda:1, but this machine has 1 CUDA device: start at most 1 process "
            "per machine (torchrun --nproc-per-node), give --device cuda:0 where each process sees only its "
            "own GPU (CUDA_VISIBLE_DEVICES), or train on the CPU with --device cpu",
        ),
        ("cuda:3", "0", "--device cuda:3: this machine has 1 CUDA device (cuda:0 to cuda:0)"),
    ],
)
def test_more_processes_than_gpus_is_a_clear_error(
    tiny_data, tmp_path, monkeypatch, capsys, device, local_rank, message
):
    """torchrun --nproc-per-node 2 on a machine with one GPU: rank 1's default device cuda:1 does not exist.
    The trainer says so before it touches CUDA or the process group (found on an H200: it was an
    'internal error: invalid device ordinal')."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    for key, value in {"WORLD_SIZE": "2", "RANK": local_rank, "LOCAL_RANK": local_rank}.items():
        monkeypatch.setenv(key, value)
    argv = ["train", str(tiny_data), "--out", str(tmp_path / "run"), *TINY[2:], "--train.max_steps=1"]
    assert main(argv + (["--device", device] if device else [])) == 2
    assert capsys.readouterr().err.strip() == f"nmt train: error: {message}"
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_set_device_before_nccl_init(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(("set_device", device)))
    monkeypatch.setattr(
        dist, "init_process_group", lambda backend, **kw: calls.append(("init", backend, kw.get("device_id")))
    )
    cuda1 = distributed.resolve_device("cuda", 1)
    assert cuda1 == torch.device("cuda", 1) and distributed.resolve_device("cpu", 1) == torch.device("cpu")
    distributed.init_process_group(cuda1, timeout_minutes=1)
    distributed.init_process_group(torch.device("cpu"), timeout_minutes=1)
    assert calls == [("set_device", cuda1), ("init", "nccl", cuda1), ("init", "gloo", None)]


def test_every_collective_tensor_is_on_the_trainer_device(tiny_data, tmp_path, monkeypatch):
    """Run the real loop in a 1-process gloo group with every collective recorded. Factory calls without
    an explicit device land on the meta device (torch.set_default_device), so a tensor built for a
    collective without `device=` (the bug that breaks NCCL) shows up here as a meta tensor."""
    from nmt.train import trainer as trainer_module

    seen: list[tuple[str, torch.device]] = []

    def recording(name, real):
        def wrapper(tensor_or_list, *args, **kwargs):
            tensors = tensor_or_list if isinstance(tensor_or_list, list) else [tensor_or_list]
            for t in tensors:
                if isinstance(t, torch.Tensor):
                    seen.append((name, t.device))
                    assert t.device == torch.device("cpu"), (
                        f"{name} got a tensor on {t.device}, not the trainer's cpu"
                    )
            return real(tensor_or_list, *args, **kwargs)

        return wrapper

    c10d = dist.distributed_c10d
    for name in ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter"):
        real = getattr(c10d, name)
        monkeypatch.setattr(c10d, name, recording(name, real))
        monkeypatch.setattr(dist, name, recording(name, real))
    for key, value in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": "1",
        "RANK": "0",
        "LOCAL_RANK": "0",
    }.items():
        monkeypatch.setenv(key, value)

    real_run = trainer_module.Trainer.run

    def run_with_meta_default(self):
        assert dist.is_initialized() and self.ddp is not None  # the distributed path, in one process
        torch.set_default_device("meta")
        try:
            return real_run(self)
        finally:
            torch.set_default_device(None)

    monkeypatch.setattr(trainer_module.Trainer, "run", run_with_meta_default)
    try:
        assert (
            main(
                [
                    "train",
                    str(tiny_data),
                    "--out",
                    str(tmp_path / "run"),
                    *TINY,
                    "--train.max_steps=3",
                    "--train.max_tokens=512",
                    "--train.update_tokens=1300",
                    "--train.save_every_steps=2",
                ]
            )
            == 0
        )
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    names = {name for name, _ in seen}
    assert {"all_reduce", "all_gather"} <= names, names
    assert all(device == torch.device("cpu") for _, device in seen), seen


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
