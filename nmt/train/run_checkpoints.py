"""A training run's checkpoints, as fairseq's ``checkpoint_utils`` does them for its trainer: writing
``step_N`` with everything an exact resume needs (weights, Adam, ``trainer_state.json``), keeping the
``best`` one, deleting those past keep_last; and before the first update, owning RUN_DIR, then
starting it (config.json, --init's weights) or resuming it (the newest checkpoint that loads, damaged
ones set aside under --resume auto, what a kill left undone mended).

`Checkpoints` is RUN_DIR's side (where, who writes: rank 0 of the job's collectives, the logs,
keep_last); `RunState` is what a checkpoint holds and a resume restores (the model, Adam, the
sampler's data position, the run's `Progress` and `Schedule`). A problem of the run directory raises
`run_dir.RunDirError`, which the trainer reports as its TrainError.

Nothing is lost at a kill: a checkpoint names the best step before ``best`` is replaced, nothing is
deleted before the copy to ``best`` is complete, and a resume copies the best step to ``best`` again
if a kill cut that short (`run_dir.mend_best`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from .. import checkpoint as ckpt
from ..config import ModelConfig, TrainConfig, to_dict
from ..data.batching import TokenBatchSampler
from .distributed import Collectives
from .finetune import InitFrom
from .guard_valid import GuardSet, admits
from .optim import Schedule
from .replay import Replay, ReplaySampler
from .run_dir import (
    RunDirError,
    RunLock,
    check_free_space,
    mend_best,
    rotate_checkpoints,
    set_aside,
    trim_metrics,
    write_config,
)
from .run_log import RunLog
from .state import Progress, load_optimizer, optimizer_tensors, rng_state, set_rng_state
from .stopping import better


@dataclass
class RunState:
    """What a checkpoint holds and a resume restores, besides config.json."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    sampler: TokenBatchSampler | ReplaySampler  # the data position (epoch, batch)
    progress: Progress
    schedule: Schedule
    accum: int  # micro-batches per update (recorded)
    guard_start: float | None = None  # --guard-valid: the guard BLEU of the model the run started from


@dataclass(frozen=True)
class Start:
    """How a run begins: ``resume`` RUN_DIR from its newest checkpoint (``fall_back``, --resume
    auto: from the newest that verifies, setting aside the damaged ones after it with a warning
    each); else a fresh start, with ``init``'s weights (and with its ``keep_optimizer`` its Adam
    state) when given (--init, fine-tuning), the schedule and the update counter starting anew.
    A fine-tuning run may also replay general data (``replay``, nmt.train.replay) and guard what
    its model knew (``guard``, nmt.train.guard_valid), started and resumed alike."""

    resume: bool = False
    fall_back: bool = False
    init: InitFrom | None = None
    replay: Replay | None = None
    guard: GuardSet | None = None


@dataclass(frozen=True)
class Resumed:
    """What a resume found: the run's progress, and its config.json (None if it has none)."""

    progress: Progress
    config: dict | None


def run_config(
    model_cfg: ModelConfig,
    cfg: TrainConfig,
    *,
    meta: dict,
    data_dir: Path,
    init: dict | None,
    adaptation: dict | None = None,
) -> dict:
    """A run's config.json (and every checkpoint's): its configurations, its data (meta.json and
    where), where --init's weights started (``init``, `finetune.InitFrom.record`), and what a
    fine-tuning run replays and guards (``adaptation``: "replay", "guard" records)."""
    config = {"model": to_dict(model_cfg), "train": to_dict(cfg), "data": meta, "data_dir": str(data_dir)}
    if init is not None:
        config["init"] = init
    config.update(adaptation or {})
    return config


def trainer_state(
    state: RunState, ranks: list[dict], *, world: int, unwritten_log: dict[str, list[str]]
) -> dict:
    """``trainer_state.json``: what an exact resume restores besides the weights and Adam
    (`restore`); ``ranks``: every rank's RNG state and data position (of ``world`` processes);
    ``unwritten_log``: the log lines a full disk kept from the files."""
    rngs = [r["rng"] for r in ranks]
    progress = state.progress.to_dict()
    out = {
        "update": progress.pop("update"),
        **state.sampler.state_dict(),
        **progress,
        "world_size": world,
        **state.schedule.to_dict(),
        "accum": state.accum,
        "rng": rngs if world > 1 else rngs[0],
        "positions": [r["position"] for r in ranks],
    }
    if unwritten_log:
        out["unwritten_log"] = unwritten_log
    if state.guard_start is not None:
        out["guard_start"] = state.guard_start
    return out


def restore(state: RunState, saved: dict, *, rank: int) -> tuple[Progress, dict[str, list[str]]]:
    """This rank's data position, the schedule and the RNG state of a ``trainer_state.json``
    (`trainer_state`), set in place; returns the progress (an old layout's best read as
    ``state.progress.best_metric``'s) and the unwritten log lines. Raises KeyError, IndexError,
    TypeError or ValueError on a malformed one (before changing anything)."""
    progress = Progress.from_dict(saved, best_metric=state.progress.best_metric)
    sampler_state = dict(saved)
    if "positions" in saved:  # every rank's data position (equal by construction; checked)
        sampler_state["epoch"], sampler_state["position"] = saved["positions"][rank]
    unwritten = {str(k): [str(line) for line in v] for k, v in saved.get("unwritten_log", {}).items()}
    rng = saved["rng"][rank] if isinstance(saved["rng"], list) else saved["rng"]
    guard_start = saved.get("guard_start")
    state.sampler.load_state_dict(sampler_state)
    state.schedule.load_dict(saved)
    set_rng_state(rng)
    state.guard_start = None if guard_start is None else float(guard_start)
    return progress, unwritten


def checkpoint_bytes(model: torch.nn.Module) -> int:
    return 4 * sum(p.numel() for p in model.parameters()) * 3  # weights + 2 Adam moments


def load_init(state: RunState, init: InitFrom) -> None:
    """Fine-tuning: the weights of ``init`` (every rank loads them, so DDP's replicas agree), and with
    ``keep_optimizer`` its Adam moments; update, schedule and data position start at 0."""
    ckpt.load_weights(
        state.model, ckpt.load_state(init.directory), source=str(init.directory / "model.safetensors")
    )
    if init.keep_optimizer:
        try:
            load_optimizer(
                state.optimizer,
                ckpt.load_tensors(init.directory / "optimizer.safetensors"),
                ckpt.read_json(init.directory / "optimizer.json"),
            )
        except (KeyError, ValueError, TypeError, RuntimeError) as e:
            raise ckpt.CheckpointError(
                f"{init.directory / 'optimizer.safetensors'}: does not match the model's optimizer ({e})"
            ) from None


@dataclass
class Checkpoints:
    """The checkpoints of ``run_dir`` (``checkpoints/step_N``, ``best``), written by rank 0 of the
    job of ``coll``; ``lock``: RUN_DIR's lock once `own` took it (rank 0)."""

    run_dir: Path
    coll: Collectives
    logs: RunLog
    keep_last: int
    spm_model: Path  # copied into every checkpoint
    lock: RunLock | None = None
    guard_drop: float | None = None  # --guard-bleu-drop: a best stays within it of the start's guard BLEU

    @property
    def is_main(self) -> bool:
        return self.coll.rank == 0

    # ------------------------------------------------------------------------- saving, best
    def save(self, state: RunState, *, config: dict, rotate: bool) -> Path:
        """Write checkpoint step_N (collective); ``rotate``: then delete those past keep_last."""
        directory = self.run_dir / "checkpoints" / f"step_{state.progress.update:08d}"
        ranks = self.coll.gather_objects(
            {"rng": rng_state(), "position": [state.sampler.epoch, state.sampler.position]},
            what="gathering RNG states and data positions for the checkpoint",
        )
        if self.is_main:
            tensors, meta = optimizer_tensors(state.optimizer)
            try:
                ckpt.save(
                    directory,
                    model=state.model,
                    config=config,
                    spm_model=self.spm_model,
                    trainer_state=trainer_state(
                        state, ranks, world=self.coll.world, unwritten_log=self.logs.unwritten
                    ),
                    optimizer_tensors=tensors,
                    optimizer_meta=meta,
                )
            except OSError as e:
                raise RunDirError(
                    f"could not write checkpoint {directory}: {e.strerror or e} "
                    "(the previous checkpoints are intact)"
                ) from None
            if rotate:
                rotate_checkpoints(self.run_dir, keep_last=self.keep_last)
        self.coll.barrier(what="the barrier after writing a checkpoint")
        return directory

    def keep_best(self, state: RunState, result: dict | None, *, config: dict, best_metric: str) -> Path:
        """After a validation (``result``: rank 0's, None elsewhere or when a stop signal cut it short,
        ``state.progress.validation_pending`` set on rank 0): keep its score if it is the best
        (``best_metric``), save a step checkpoint, copy it to ``best`` when it improves, then delete
        the step checkpoints past keep_last. An interrupted validation is pending in the checkpoint:
        a resume does it first."""
        progress = state.progress
        admitted = self.guard(state, result)
        improved = self.score(
            progress, result, best_metric=best_metric, epoch=state.sampler.epoch, admitted=admitted
        )
        shared = [
            progress.best,
            progress.best_metric,
            progress.best_step,
            progress.since_best,
            progress.validation_pending,
            state.guard_start,
        ]
        self.coll.broadcast_objects(shared, what="sharing the validation's outcome")
        (
            progress.best,
            progress.best_metric,
            progress.best_step,
            progress.since_best,
            progress.validation_pending,
            state.guard_start,
        ) = shared
        directory = self.save(state, config=config, rotate=False)
        if improved:
            try:
                ckpt.copy_checkpoint(directory, self.run_dir / "checkpoints" / "best")
            except OSError as e:
                raise RunDirError(
                    f"could not copy {directory} to best: {e.strerror or e} (the previous best is intact)"
                ) from None
        if self.is_main:
            rotate_checkpoints(self.run_dir, keep_last=self.keep_last)
        return directory

    def guard(self, state: RunState, result: dict | None) -> bool:
        """Whether the guard (--guard-valid) admits a validation ``result`` as a best: its guard BLEU
        within ``guard_drop`` of the start's (the first guard BLEU of the run, that of update 0,
        kept in ``state.guard_start``). True without a guard."""
        if result is None or "guard_bleu" not in result or self.guard_drop is None:
            return True
        if state.guard_start is None:
            state.guard_start = result["guard_bleu"]
        return admits(result["guard_bleu"], start=state.guard_start, bleu_drop=self.guard_drop)

    def score(
        self, progress: Progress, result: dict | None, *, best_metric: str, epoch: int, admitted: bool = True
    ) -> bool:
        """Log a validation result (metrics.jsonl, train.log) and keep its ``best_metric`` score if it
        is the best so far (returned; `stopping.better`; the first score of a metric changed on
        resume is) and the guard ``admitted`` it; since_best counts the validations since the last
        best (train.patience)."""
        if result is None:
            return False
        value = result["bleu"] if best_metric == "bleu" else result["loss"]
        better_here = progress.best_metric != best_metric or better(best_metric, value, progress.best)
        improved = better_here and admitted
        if improved:
            progress.best, progress.best_metric, progress.best_step = value, best_metric, progress.update
        progress.since_best = 0 if improved else progress.since_best + 1
        self.logs.metric({"split": "valid", "update": progress.update, "epoch": epoch, **result})
        refused = (
            f" (better, but its guard BLEU is more than {self.guard_drop} below the start's: not the best)"
            if better_here and not admitted
            else ""
        )
        self.logs.log(
            "valid update {}: {}{}{}".format(
                progress.update,
                ", ".join(f"{k} {v:.4g}" for k, v in result.items() if isinstance(v, float)),
                " (best)" if improved else "",
                refused,
            )
        )
        return improved

    # ------------------------------------------------------------------------- owning, starting, resuming
    def own(self) -> list[str]:
        """Own RUN_DIR (rank 0 takes its lock: a second `nmt train` on it is refused and touches
        nothing) and remove the temporaries a killed writer left; returns their names."""
        refusal, stale = "", []
        if self.is_main:
            try:
                self.lock = RunLock.acquire(self.run_dir)
                stale = ckpt.clean_stale(self.run_dir / "checkpoints")  # ours now: no live writer
            except RunDirError as e:
                refusal = str(e)
            except OSError as e:  # the temporaries could not be removed: give the directory back
                if self.lock is not None:
                    self.lock.release()
                refusal = f"{self.run_dir}: could not take it over (lock, a killed writer's temporaries): {e}"
        if self.coll.sum([bool(refusal)], what="the run directory lock")[0]:  # also: rank 0 has cleaned
            raise RunDirError(
                refusal or f"{self.run_dir}: rank 0 could not own the run directory (see its error)"
            )
        return stale

    def release(self, *, remove_empty: bool = False) -> None:
        """Give up RUN_DIR (delete its lock file); ``remove_empty``: and the directory, if the lock
        file was all it held."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None
            if remove_empty and self.run_dir.is_dir() and not any(self.run_dir.iterdir()):
                self.run_dir.rmdir()

    def start_or_resume(
        self,
        state: RunState,
        *,
        config: dict,
        start: Start,
        stale: list[str],
    ) -> Resumed | None:
        """Start or resume RUN_DIR as ``start`` says once `own` has removed the ``stale`` temporaries;
        returns what a resume found (None for a start). A run
        directory with no complete checkpoint (killed before its first one, or stopped by the disk
        check) is not stuck: a plain start begins it again with the new configuration, ``--resume``
        begins it again with its saved config.json."""
        complete = ckpt.list_step_checkpoints(self.run_dir)
        if start.resume and complete:
            return self._resume(state, complete, fall_back=start.fall_back, stale=stale)
        if start.resume and not (self.run_dir / "config.json").exists():
            raise RunDirError(f"--resume: {self.run_dir} holds no run to resume (no config.json)")
        if complete:
            raise RunDirError(
                f"{self.run_dir} already holds a run; use --resume to continue it or choose another --out"
            )
        self._start(state, config=config, stale=stale, init=start.init)
        return None

    def _start(self, state: RunState, *, config: dict, stale: list[str], init: InitFrom | None) -> None:
        """A fresh start (or a start again: a run killed before its first checkpoint): check the room
        for the checkpoints, write config.json; with --init, take that checkpoint's weights."""
        config_path = self.run_dir / "config.json"
        restart = config_path.exists()
        self.coll.barrier(what="the run directory check")  # every rank has checked before rank 0 writes
        if self.is_main:
            check_free_space(
                self.run_dir, checkpoint_bytes=checkpoint_bytes(state.model), keep_last=self.keep_last
            )
            if restart:  # a start that never reached a checkpoint: its logs describe nothing kept
                trim_metrics(self.run_dir / "metrics.jsonl", state.progress.update)
            write_config(config_path, config)
            if restart:
                self.logs.log(
                    f"{self.run_dir} has no complete checkpoint (a start killed before its first "
                    "one): starting it again from step 0"
                )
            if stale:
                self.logs.log(f"removed stale temporaries of a killed run: {', '.join(stale)}")
        if init is not None:
            load_init(state, init)
            self.logs.log(
                f"initialised from {init.directory} (model.safetensors sha256 {init.sha256[:12]}...; "
                f"{'its optimizer state kept' if init.keep_optimizer else 'new optimizer state'}; "
                "schedule and step counter start anew)"
            )

    def _resume(self, state: RunState, complete: list[Path], *, fall_back: bool, stale: list[str]) -> Resumed:
        """Resume from the newest of the ``complete`` checkpoints that loads, then mend what a kill
        left undone: the copy to ``best``, the deletion past keep_last, metrics past the checkpoint,
        the log lines a full disk kept from the files."""
        if self.is_main:
            check_free_space(
                self.run_dir, checkpoint_bytes=checkpoint_bytes(state.model), keep_last=self.keep_last
            )
        progress = self.load_newest(state, complete, fall_back=fall_back)
        config_path = self.run_dir / "config.json"
        config = ckpt.read_json(config_path) if config_path.exists() else None
        if self.is_main:
            mended = mend_best(self.run_dir, progress.best_step)
            rotate_checkpoints(self.run_dir, keep_last=self.keep_last)  # a kill after the checkpoint
            trim_metrics(self.run_dir / "metrics.jsonl", progress.update)
            self.logs.write_back()
            if stale:
                self.logs.log(f"removed stale temporaries of a killed run: {', '.join(stale)}")
            if mended:
                self.logs.log(mended)
        return Resumed(progress=progress, config=config)

    def load_newest(self, state: RunState, complete: list[Path], *, fall_back: bool) -> Progress:
        """Load the newest of the ``complete`` checkpoints; with ``fall_back`` (--resume auto) the
        newest that verifies and loads, the damaged ones after it set aside as ``corrupt-step_N``
        (kept for inspection, never listed as checkpoints) with a warning naming each. Returns the
        progress it holds."""
        damaged = []
        for directory in reversed(complete):
            try:
                progress = self.load(state, directory)
                break
            except ckpt.CheckpointError as e:
                if not fall_back:
                    raise
                damaged.append((directory, e))
        else:
            raise RunDirError(
                f"--resume auto: none of the {len(complete)} checkpoints of {self.run_dir} "
                f"verifies (the newest: {damaged[0][1]})"
            )
        self.coll.barrier(what="choosing the checkpoint to resume from")
        for directory, e in damaged if self.is_main else []:
            self.logs.log(
                f"warning: {directory} is damaged ({e}); set aside as {set_aside(directory).name}, "
                "resuming from an older checkpoint (delete it once inspected)"
            )
        self.logs.log(
            f"resumed from {self.run_dir / 'checkpoints' / f'step_{progress.update:08d}'} at update "
            f"{progress.update} (epoch {state.sampler.epoch}, batch {state.sampler.position})"
        )
        return progress

    def load(self, state: RunState, directory: Path) -> Progress:
        """The weights, Adam's state and the trainer state of checkpoint ``directory`` (set in
        ``state``; the progress returned); a CheckpointError names the file that fails."""
        ckpt.verify(directory)
        ckpt.load_weights(
            state.model, ckpt.load_state(directory), source=str(directory / "model.safetensors")
        )
        optimizer_meta, saved = (
            ckpt.read_json(directory / name) for name in ("optimizer.json", "trainer_state.json")
        )
        try:
            load_optimizer(
                state.optimizer, ckpt.load_tensors(directory / "optimizer.safetensors"), optimizer_meta
            )
        except (KeyError, ValueError, TypeError, RuntimeError) as e:
            raise ckpt.CheckpointError(
                f"{directory / 'optimizer.safetensors'}: does not match the model's optimizer ({e})"
            ) from None
        if saved.get("world_size", 1) != self.coll.world:
            raise RunDirError(
                f"{directory}: saved with {saved.get('world_size', 1)} processes; resume "
                f"with the same number (now {self.coll.world}) for an exact continuation"
            )
        try:
            progress, self.logs.unwritten = restore(state, saved, rank=self.coll.rank)
        except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as e:
            raise ckpt.CheckpointError(
                f"{directory / 'trainer_state.json'}: malformed ({type(e).__name__}: {e})"
            ) from None
        return progress
