"""Multi-process training: the process group, the collectives of the training loop on its device (with
errors naming rank, update and collective), and SIGTERM / SIGINT-driven preemption.

Under ``torchrun`` (which sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT):

    torchrun --nproc-per-node K -m nmt train DATA --out RUN ...                     # one machine
    torchrun --nnodes N --nproc-per-node K --rdzv-backend c10d --rdzv-endpoint HOST:PORT \\
        --rdzv-id JOB -m nmt train DATA --out RUN ...                               # N machines

The rules that keep every rank in the same collective at the same time:

- Stop, save, validate and preemption are decided once per update for the whole job
  (`stopping.after_update`, the rules; :meth:`Collectives.max`, the all-reduce that shares them).
- Gradient accumulation is computed from the batches of all shards (one all-reduce at set-up).
- ``torch.cuda.set_device`` is called before ``init_process_group``; the backend is nccl on CUDA
  and gloo on CPU; every tensor handed to a collective lives on the trainer's device.
- A collective that fails or exceeds ``train.collective_timeout`` minutes raises
  :class:`DistributedError` naming the rank, the update and the collective; that process exits
  with the message and torchrun stops the others.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


class DistributedError(Exception):
    """A collective failed or timed out; the message names the rank, the update and the collective."""


@dataclass(frozen=True)
class Topology:
    """Where this process sits in the job (torchrun's environment variables)."""

    world: int = 1
    rank: int = 0
    local_rank: int = 0
    launched: bool = False  # started by torchrun (a process group is used even with world 1)

    @classmethod
    def from_env(cls) -> "Topology":
        env = os.environ
        return cls(
            world=int(env.get("WORLD_SIZE", "1")),
            rank=int(env.get("RANK", "0")),
            local_rank=int(env.get("LOCAL_RANK", "0")),
            launched="WORLD_SIZE" in env and "MASTER_ADDR" in env,
        )


def resolve_device(device: str | None, local_rank: int) -> torch.device:
    """The trainer's device: ``cuda:LOCAL_RANK`` by default (or for a bare ``cuda``), else as given."""
    if device is None:
        return torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and resolved.index is None:
        resolved = torch.device("cuda", local_rank)
    return resolved


class DeviceError(Exception):
    """A device this machine cannot train on; the message says why."""


def train_device(device: str | None, local_rank: int) -> torch.device:
    """The device to train on (`resolve_device`), or a DeviceError saying why it cannot be."""
    try:
        resolved = resolve_device(device, local_rank)
    except RuntimeError:
        raise DeviceError(f"--device {device}: not a device (cpu, cuda, cuda:1 ...)") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError(f"--device {device}: CUDA is not available on this machine")
    if resolved.type == "cuda" and resolved.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        gpus = f"{count} CUDA device{'s' if count != 1 else ''}"
        if device and torch.device(device).index is not None:  # --device cuda:3 on a 1-GPU machine
            raise DeviceError(f"--device {device}: this machine has {gpus} (cuda:0 to cuda:{count - 1})")
        # torchrun --nproc-per-node 2 on a machine with one GPU: local rank 1 would take cuda:1
        raise DeviceError(
            f"local rank {local_rank} would train on {resolved}, but this machine has "
            f"{gpus}: start at most {count} process{'es' if count != 1 else ''} per machine "
            "(torchrun --nproc-per-node), give --device cuda:0 where each process sees only "
            "its own GPU (CUDA_VISIBLE_DEVICES), or train on the CPU with --device cpu"
        )
    return resolved


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def init_process_group(device: torch.device, *, timeout_minutes: float) -> None:
    """Join the job's process group: set the CUDA device first, then nccl (CUDA) or gloo (CPU)."""
    timeout = datetime.timedelta(minutes=timeout_minutes)
    if device.type == "cuda":
        # before init: NCCL communicators and object collectives use the current device
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", timeout=timeout, device_id=device)
    else:
        dist.init_process_group("gloo", timeout=timeout)


class Collectives:
    """The collectives of the training loop: tensors on ``device``, errors that say where.

    With ``active=False`` (a single process not started by torchrun) every method returns the local
    values without communicating.
    """

    def __init__(self, *, device: torch.device, rank: int, world: int, active: bool, timeout_minutes: float):
        self.device, self.rank, self.world, self.active = device, rank, world, active
        self.timeout_minutes = timeout_minutes
        self.update = 0  # the update in progress, for error messages

    @contextlib.contextmanager
    def guard(self, what: str):
        """Turn a failed or timed-out collective into one line naming the rank, update and collective."""
        try:
            yield
        except RuntimeError as e:  # gloo and nccl raise RuntimeError (DistBackendError) subclasses
            text = str(e)
            if not self.active or not (
                isinstance(e, dist.DistError)
                or any(mark in text.lower() for mark in ("gloo", "nccl", "timed out", "connection", "peer"))
            ):
                raise  # not a communication failure (e.g. out of memory in backward): as it is
            lines = text.strip().splitlines()
            raise DistributedError(
                f"rank {self.rank} of {self.world}: {what} failed at update {self.update}: "
                f"{lines[0] if lines else type(e).__name__} (another rank crashed or hung, or the "
                f"collective took longer than train.collective_timeout={self.timeout_minutes:g} min)"
            ) from None

    def sum(self, values: Sequence[float], *, what: str) -> list[float]:
        """Element-wise sum over ranks of a few numbers (float64, exact for counts below 2**53)."""
        if not self.active:
            return [float(v) for v in values]
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device)
        with self.guard(what):
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.tolist()

    def sum_(self, tensor: torch.Tensor, *, what: str) -> torch.Tensor:
        """In-place sum over ranks of a tensor that already lives on ``device``."""
        if self.active:
            assert tensor.device == self.device, (tensor.device, self.device)
            with self.guard(what):
                dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def max(self, values: Sequence[int], *, what: str) -> list[int]:
        """Element-wise maximum over ranks of a few integers (flags: any rank's 1 wins)."""
        if not self.active:
            return [int(v) for v in values]
        t = torch.tensor([int(v) for v in values], dtype=torch.int64, device=self.device)
        with self.guard(what):
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def broadcast_objects(self, objects: list[Any], *, what: str) -> list[Any]:
        """Rank 0's JSON-able ``objects`` on every rank (in place, and returned)."""
        if self.active and self.world > 1:
            with self.guard(what):
                dist.broadcast_object_list(objects, src=0)
        return objects

    def gather_objects(self, obj: Any, *, what: str) -> list[Any]:
        """Every rank's JSON-able ``obj``, in rank order (object collectives use the current device,
        which ``init_process_group`` set)."""
        if not self.active:
            return [obj]
        out: list[Any] = [None] * self.world
        with self.guard(what):
            dist.all_gather_object(out, obj)
        return out

    def barrier(self, *, what: str) -> None:
        if self.active:
            with self.guard(what):
                dist.barrier()


def join_job(topo: Topology, device: torch.device, *, timeout_minutes: float) -> Collectives:
    """The process group of a torchrun job (none for a single process) and its collectives."""
    if (topo.launched or topo.world > 1) and not dist.is_initialized():
        init_process_group(device, timeout_minutes=timeout_minutes)
    return Collectives(
        device=device,
        rank=topo.rank,
        world=topo.world,
        active=dist.is_initialized(),
        timeout_minutes=timeout_minutes,
    )


class Interrupted(Exception):
    """A stop signal (SIGTERM, SIGINT) arrived during an interruptible phase (validation)."""


class Preemption:
    """SIGTERM (what job schedulers send before killing) and SIGINT (Ctrl-C) set ``requested``; the
    loop then checkpoints at the next update boundary (SIGTERM exits 0, SIGINT 130). Inside
    :meth:`interruptible` (validation, which can outlast a scheduler's grace period) the signal also
    raises :class:`Interrupted` at once. A second SIGINT raises KeyboardInterrupt: stop now, without
    a checkpoint (those written are intact). A context manager: the previous handlers are restored."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.requested = False
        self.signal_name: str | None = None  # the first signal received: "SIGTERM" or "SIGINT"
        self._previous: dict = {}
        self._interruptible = False

    def _handler(self, signum, frame) -> None:
        if signum == signal.SIGINT and self.signal_name == "SIGINT":
            raise KeyboardInterrupt
        self.requested = True
        self.signal_name = self.signal_name or signal.Signals(signum).name
        if self._interruptible:
            self._interruptible = False
            raise Interrupted(self.signal_name)

    @contextlib.contextmanager
    def interruptible(self):
        """A phase that a stop signal ends at once (raising Interrupted), not at its end; one
        requested before it is not started."""
        if self.requested:
            raise Interrupted(self.signal_name)
        self._interruptible = True
        try:
            yield
        finally:
            self._interruptible = False

    def until_signal(self, work: Callable[[], T]) -> tuple[T | None, bool]:
        """``work()`` as an `interruptible` phase: its result and False, or None and True when a stop
        signal cut it short."""
        try:
            with self.interruptible():
                return work(), False
        except Interrupted:
            return None, True

    def __enter__(self) -> "Preemption":
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:  # an ignored signal stays ignored (a script's background job: SIGINT)
                if signal.getsignal(s) is not signal.SIG_IGN:
                    self._previous[s] = signal.signal(s, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        for s, previous in self._previous.items():
            if previous is not None:  # None: a handler not installed from Python
                signal.signal(s, previous)
        self._previous = {}
