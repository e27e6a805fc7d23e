"""Multi-process training: the process group, collectives on its device, and one decision per update
that every rank takes identically (so a job never hangs), plus SIGTERM / SIGINT-driven preemption.

Under ``torchrun`` (which sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT):

    torchrun --nproc-per-node K -m nmt train DATA --out RUN ...                     # one machine
    torchrun --nnodes N --nproc-per-node K --rdzv-backend c10d --rdzv-endpoint HOST:PORT \\
        --rdzv-id JOB -m nmt train DATA --out RUN ...                               # N machines

The rules that keep every rank in the same collective at the same time:

- Stop (max_steps, max_time, max_epochs), save, validate and preemption are decided once per update
  by :meth:`Collectives.decide`: rank 0 fills in what its step counter and its clock say, every rank
  adds whether it received SIGTERM, and one all-reduce(MAX) of a 4-integer tensor gives every rank
  the same answer. "This rank's data is exhausted" is summed with the update's token count before
  the update, so all ranks stop together.
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
from typing import Any, Sequence

import torch
import torch.distributed as dist

# Reasons a run stops; the index is the code exchanged between ranks (0 = keep going).
STOP_REASONS = (None, "max_steps", "max_time", "max_epochs", "preempted", "decay_end")


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


@dataclass(frozen=True)
class Decision:
    """What every rank does after an update."""

    stop: str | None  # one of STOP_REASONS
    save: bool
    validate: bool
    decay: bool = False  # the learning-rate decay (train.decay_fraction) starts after this update


def local_decision(
    *,
    step: int,
    elapsed: float,
    since_save: float,
    max_steps: int,
    max_time: float,
    save_every_steps: int,
    save_every_minutes: float,
    valid_every_steps: int,
    decay_fraction: float = 0.0,
    decay_end: int = 0,
) -> list[int]:
    """Rank 0's view after update ``step``: [stop code, save, validate, start the decay] (times in
    seconds, limits in the config's units: max_time and save_every_minutes in minutes).

    ``decay_end`` is the last update of a decay already under way (0 = none): reaching it stops the
    run. The decay starts once the run has used ``1 - decay_fraction`` of max_steps or of max_time."""
    stop = 0
    if max_steps and step >= max_steps:
        stop = STOP_REASONS.index("max_steps")
    elif decay_end and step >= decay_end:
        stop = STOP_REASONS.index("decay_end")
    elif max_time and elapsed >= max_time * 60:
        stop = STOP_REASONS.index("max_time")
    save = bool(
        (save_every_steps and step % save_every_steps == 0)
        or (save_every_minutes and since_save >= save_every_minutes * 60)
    )
    validate = bool(valid_every_steps and step % valid_every_steps == 0)
    keep = 1.0 - decay_fraction
    decay = bool(
        decay_fraction
        and not decay_end
        and not stop
        and ((max_steps and step >= keep * max_steps) or (max_time and elapsed >= keep * max_time * 60))
    )
    return [stop, int(save), int(validate), int(decay)]


class Collectives:
    """The collectives of the training loop: tensors on ``device``, errors that say where.

    With ``active=False`` (a single process not started by torchrun) every method returns the local
    values without communicating.
    """

    def __init__(self, *, device: torch.device, rank: int, world: int, active: bool, timeout_minutes: float):
        self.device, self.rank, self.world, self.active = device, rank, world, active
        self.timeout_minutes = timeout_minutes
        self.step = 0  # the update in progress, for error messages

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
                f"rank {self.rank} of {self.world}: {what} failed at update {self.step}: "
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

    def decide(self, local: Sequence[int], *, preempted: bool) -> Decision:
        """One decision for the whole job: rank 0's ``local`` ([stop, save, validate, decay]; other
        ranks' are ignored) combined with every rank's SIGTERM flag by one all-reduce(MAX)."""
        flags = [*(local if self.rank == 0 else [0, 0, 0, 0]), int(preempted)]
        if self.active:
            t = torch.tensor(flags, dtype=torch.int64, device=self.device)
            with self.guard("the stop/save/validate decision"):
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
            flags = t.tolist()
        stop, save, validate, decay, preempt = flags
        if not stop and preempt:
            stop = STOP_REASONS.index("preempted")
        return Decision(stop=STOP_REASONS[stop], save=bool(save), validate=bool(validate), decay=bool(decay))

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
