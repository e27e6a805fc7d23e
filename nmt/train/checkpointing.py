"""A training run's checkpoints, as fairseq's ``checkpoint_utils`` does them for its trainer: writing
``step_N`` with everything an exact resume needs (weights, Adam, ``trainer_state.json``), keeping the
``best`` one, deleting those past keep_last; and before the first update, owning RUN_DIR, then
starting it (config.json, --init's weights) or resuming it (the newest checkpoint that loads, damaged
ones set aside under --resume auto, what a kill left undone mended).

Every function takes the `trainer.Trainer` (``t``; not imported: it imports this module) and uses its
model, optimizer, sampler, counters, logs and collectives. A problem of the run directory raises
`run_dir.RunDirError`, which the trainer reports as its TrainError.

Nothing is lost at a kill: a checkpoint names the best step before ``best`` is replaced, nothing is
deleted before the copy to ``best`` is complete, and a resume copies the best step to ``best`` again
if a kill cut that short (`run_dir.mend_best`)."""

from __future__ import annotations

from pathlib import Path

import torch.distributed as dist

from .. import checkpoint as ckpt
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
from .state import load_optimizer, optimizer_tensors, rng_state, set_rng_state


# ----------------------------------------------------------------------------- saving, best
def save(t, *, rotate: bool) -> Path:
    """Write checkpoint step_N (collective); ``rotate``: then delete those past keep_last."""
    directory = t.run_dir / "checkpoints" / f"step_{t.step:08d}"
    ranks = t.coll.gather_objects(
        {"rng": rng_state(), "position": [t.epoch, t.position]},
        what="gathering RNG states and data positions for the checkpoint",
    )
    if t.is_main:
        tensors, meta = optimizer_tensors(t.optimizer)
        try:
            ckpt.save(
                directory,
                model=t.model,
                config=t.full_config(),
                spm_model=t.data_dir / "spm.model",
                trainer_state=trainer_state(t, ranks),
                optimizer_tensors=tensors,
                optimizer_meta=meta,
            )
        except OSError as e:
            raise RunDirError(
                f"could not write checkpoint {directory}: {e.strerror or e} "
                "(the previous checkpoints are intact)"
            ) from None
        if rotate:
            rotate_checkpoints(t.run_dir, keep_last=t.cfg.keep_last)
    t.coll.barrier(what="the barrier after writing a checkpoint")
    return directory


def trainer_state(t, ranks: list[dict]) -> dict:
    """``trainer_state.json``: what an exact resume restores besides the weights and Adam
    (`restore`); ``ranks``: every rank's RNG state and data position."""
    rngs = [r["rng"] for r in ranks]
    state = {
        "step": t.step,
        **t.sampler.state_dict(),
        "best": t.best,
        "best_step": t.best_step,
        "since_best": t.since_best,
        "validation_pending": t.validation_pending,
        "elapsed": t.elapsed,
        "tokens_seen": t.tokens_seen,
        "world_size": t.world,
        "decay_start": t.decay_start,
        "decay_end": t.decay_end,
        "accum": t.accum,
        "rng": rngs if t.world > 1 else rngs[0],
        "positions": [r["position"] for r in ranks],
    }
    if t.logs.unwritten:
        state["unwritten_log"] = t.logs.unwritten
    return state


def keep_best(t, result: dict | None, *, interrupted: bool) -> None:
    """After a validation (``result``: rank 0's, None elsewhere or when a stop signal ``interrupted``
    it): keep its score if it is the best, save a step checkpoint, copy it to ``best`` when it
    improves, then delete the step checkpoints past keep_last. An interrupted validation is
    pending in the checkpoint: a resume does it first."""
    improved = score(t, result) if result is not None else False
    if t.world > 1:
        shared = [t.best, t.best_step, t.since_best, interrupted]
        dist.broadcast_object_list(shared, src=0)
        t.best, t.best_step, t.since_best, interrupted = shared
    t.validation_pending = interrupted
    directory = save(t, rotate=False)
    if improved:
        try:
            ckpt.copy_checkpoint(directory, t.run_dir / "checkpoints" / "best")
        except OSError as e:
            raise RunDirError(
                f"could not copy {directory} to best: {e.strerror or e} (the previous best is intact)"
            ) from None
    if t.is_main:
        rotate_checkpoints(t.run_dir, keep_last=t.cfg.keep_last)
    if interrupted:
        t.logs.log(
            f"validation of step {t.step} interrupted ({t.preemption.signal_name}): "
            "checkpoint written, its validation pending"
        )


def score(t, result: dict) -> bool:
    """Log a validation result (metrics.jsonl, train.log) and keep its score if it is the best so far
    (returned); since_best counts the validations since the last best (train.patience)."""
    value = -result["bleu"] if t.cfg.best_metric == "bleu" else result["loss"]  # lower is better
    improved = t.best is None or value < t.best
    if improved:
        t.best, t.best_step = value, t.step
    t.since_best = 0 if improved else t.since_best + 1
    t.logs.metric({"split": "valid", "step": t.step, "epoch": t.epoch, **result})
    t.logs.log(
        "valid step {}: {}{}".format(
            t.step,
            ", ".join(f"{k} {v:.4g}" for k, v in result.items() if isinstance(v, float)),
            " (best)" if improved else "",
        )
    )
    return improved


# ----------------------------------------------------------------------------- owning, starting, resuming
def own(t) -> list[str]:
    """Own RUN_DIR (rank 0 takes its lock, ``t.lock``: a second `nmt train` on it is refused and
    touches nothing) and remove the temporaries a killed writer left; returns their names."""
    refusal, stale = "", []
    if t.is_main:
        try:
            t.lock = RunLock.acquire(t.run_dir)
            stale = ckpt.clean_stale(t.run_dir / "checkpoints")  # ours now: no live writer
        except RunDirError as e:
            refusal = str(e)
        except OSError as e:  # the temporaries could not be removed: give the directory back
            if t.lock is not None:
                t.lock.release()
            refusal = f"{t.run_dir}: could not take it over (lock, a killed writer's temporaries): {e}"
    if t.coll.sum([bool(refusal)], what="the run directory lock")[0]:  # also: rank 0 has cleaned
        raise RunDirError(refusal or f"{t.run_dir}: rank 0 could not own the run directory (see its error)")
    return stale


def start_or_resume(t, resume: bool, *, fall_back: bool, stale: list[str]) -> None:
    """Start or resume RUN_DIR. A run directory with no complete checkpoint (killed before its
    first one, or stopped by the disk check) is not stuck: a plain start begins it again with
    the new configuration, ``--resume`` begins it again with its saved config.json."""
    complete = ckpt.list_step_checkpoints(t.run_dir)
    if resume and complete:
        _resume(t, complete, fall_back=fall_back, stale=stale)
        return
    if resume and not (t.run_dir / "config.json").exists():
        raise RunDirError(f"--resume: {t.run_dir} holds no run to resume (no config.json)")
    if complete:
        raise RunDirError(
            f"{t.run_dir} already holds a run; use --resume to continue it or choose another --out"
        )
    _start(t, stale=stale)


def checkpoint_bytes(t) -> int:
    return 4 * sum(p.numel() for p in t.model.parameters()) * 3  # weights + 2 Adam moments


def _start(t, *, stale: list[str]) -> None:
    """A fresh start (or a start again: a run killed before its first checkpoint): check the room
    for the checkpoints, write config.json; with --init, take that checkpoint's weights."""
    config_path = t.run_dir / "config.json"
    restart = config_path.exists()
    t.coll.barrier(what="the run directory check")  # every rank has checked before rank 0 writes
    if t.is_main:
        check_free_space(t.run_dir, checkpoint_bytes=checkpoint_bytes(t), keep_last=t.cfg.keep_last)
        if restart:  # a start that never reached a checkpoint: its logs describe nothing kept
            trim_metrics(t.run_dir / "metrics.jsonl", t.step)
        write_config(config_path, t.full_config())
        if restart:
            t.logs.log(
                f"{t.run_dir} has no complete checkpoint (a start killed before its first "
                "one): starting it again from step 0"
            )
        if stale:
            t.logs.log(f"removed stale temporaries of a killed run: {', '.join(stale)}")
    if t.init is not None:
        load_init(t, t.init)


def _resume(t, complete: list[Path], *, fall_back: bool, stale: list[str]) -> None:
    """Resume from the newest of the ``complete`` checkpoints that loads, then mend what a kill
    left undone: the copy to ``best``, the deletion past keep_last, metrics past the checkpoint,
    the log lines a full disk kept from the files."""
    if t.is_main:
        check_free_space(t.run_dir, checkpoint_bytes=checkpoint_bytes(t), keep_last=t.cfg.keep_last)
    load_newest(t, complete, fall_back=fall_back)
    config_path = t.run_dir / "config.json"
    if config_path.exists():  # a fine-tuned run keeps saying where its weights started
        t.init_record = ckpt.read_json(config_path).get("init")
    if t.is_main:
        mended = mend_best(t.run_dir, t.best_step)
        rotate_checkpoints(t.run_dir, keep_last=t.cfg.keep_last)  # a kill after the checkpoint
        trim_metrics(t.run_dir / "metrics.jsonl", t.step)
        t.logs.write_back()
        if stale:
            t.logs.log(f"removed stale temporaries of a killed run: {', '.join(stale)}")
        if mended:
            t.logs.log(mended)


def load_newest(t, complete: list[Path], *, fall_back: bool) -> None:
    """Load the newest of the ``complete`` checkpoints; with ``fall_back`` (--resume auto) the
    newest that verifies and loads, the damaged ones after it set aside as ``corrupt-step_N``
    (kept for inspection, never listed as checkpoints) with a warning naming each."""
    damaged = []
    for directory in reversed(complete):
        try:
            load(t, directory)
            break
        except ckpt.CheckpointError as e:
            if not fall_back:
                raise
            damaged.append((directory, e))
    else:
        raise RunDirError(
            f"--resume auto: none of the {len(complete)} checkpoints of {t.run_dir} "
            f"verifies (the newest: {damaged[0][1]})"
        )
    t.coll.barrier(what="choosing the checkpoint to resume from")
    for directory, e in damaged if t.is_main else []:
        t.logs.log(
            f"warning: {directory} is damaged ({e}); set aside as {set_aside(directory).name}, "
            "resuming from an older checkpoint (delete it once inspected)"
        )
    t.logs.log(
        f"resumed from {t.run_dir / 'checkpoints' / f'step_{t.step:08d}'} at step {t.step} "
        f"(epoch {t.epoch}, batch {t.position})"
    )


def load(t, directory: Path) -> None:
    """The weights, Adam's state and the trainer state of checkpoint ``directory``; a CheckpointError
    names the file that fails."""
    ckpt.verify(directory)
    ckpt.load_weights(t.model, ckpt.load_state(directory), source=str(directory / "model.safetensors"))
    optimizer_meta, state = (
        ckpt.read_json(directory / name) for name in ("optimizer.json", "trainer_state.json")
    )
    try:
        load_optimizer(t.optimizer, ckpt.load_tensors(directory / "optimizer.safetensors"), optimizer_meta)
    except (KeyError, ValueError, TypeError, RuntimeError) as e:
        raise ckpt.CheckpointError(
            f"{directory / 'optimizer.safetensors'}: does not match the model's optimizer ({e})"
        ) from None
    if state.get("world_size", 1) != t.world:
        raise RunDirError(
            f"{directory}: saved with {state.get('world_size', 1)} processes; resume "
            f"with the same number (now {t.world}) for an exact continuation"
        )
    try:
        restore(t, state)
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as e:
        raise ckpt.CheckpointError(
            f"{directory / 'trainer_state.json'}: malformed ({type(e).__name__}: {e})"
        ) from None


def restore(t, state: dict) -> None:
    """The counters, this rank's data position and RNG state, and the unwritten log lines of a
    ``trainer_state.json`` (`trainer_state`)."""
    t.step = int(state["step"])
    sampler_state = dict(state)
    if "positions" in state:  # every rank's data position (equal by construction; checked)
        sampler_state["epoch"], sampler_state["position"] = state["positions"][t.rank]
    t.sampler.load_state_dict(sampler_state)
    t.best, t.elapsed, t.tokens_seen = state["best"], state["elapsed"], state["tokens_seen"]
    t.decay_start, t.decay_end = (
        int(state.get("decay_start", 0)),
        int(state.get("decay_end", 0)),
    )
    t.best_step = state.get("best_step")  # absent before issue 42
    t.since_best = int(state.get("since_best", 0))
    t.validation_pending = bool(state.get("validation_pending", False))
    t.logs.unwritten = {str(k): [str(line) for line in v] for k, v in state.get("unwritten_log", {}).items()}
    set_rng_state(state["rng"][t.rank] if isinstance(state["rng"], list) else state["rng"])


def load_init(t, init) -> None:
    """Fine-tuning: the weights of ``init`` (a `finetune.InitFrom`; every rank loads them, so DDP's
    replicas agree), and with ``keep_optimizer`` its Adam moments; step, schedule and data position
    start at 0."""
    ckpt.load_weights(
        t.model, ckpt.load_state(init.directory), source=str(init.directory / "model.safetensors")
    )
    if init.keep_optimizer:
        try:
            load_optimizer(
                t.optimizer,
                ckpt.load_tensors(init.directory / "optimizer.safetensors"),
                ckpt.read_json(init.directory / "optimizer.json"),
            )
        except (KeyError, ValueError, TypeError, RuntimeError) as e:
            raise ckpt.CheckpointError(
                f"{init.directory / 'optimizer.safetensors'}: does not match the model's optimizer ({e})"
            ) from None
    t.logs.log(
        f"initialised from {init.directory} (model.safetensors sha256 {init.sha256[:12]}...; "
        f"{'its optimizer state kept' if init.keep_optimizer else 'new optimizer state'}; "
        "schedule and step counter start anew)"
    )
