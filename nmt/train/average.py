"""Checkpoint averaging (section 6.1): "for the base models, we used a single model obtained by
averaging the last 5 checkpoints, which were written at 10-minute intervals. For the big models,
we averaged the last 20 checkpoints." The formula (`average`) and `nmt average` live here.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .. import checkpoint as ckpt
from ..errors import UserError
from ..model import Transformer


class AverageError(UserError):
    """A user-facing error of `nmt average`; the message names the directory."""


def average(directories: list[str | Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the checkpoints' weights (float64 accumulation, float32 result)."""
    if not directories:
        raise ckpt.CheckpointError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    for d in directories:
        ckpt.verify(d)
        state = ckpt.load_state(d)
        if total and set(state) != set(total):
            raise ckpt.CheckpointError(f"{d}: parameters differ from {directories[0]}")
        for k, v in state.items():
            total[k] = total[k] + v.double() if k in total else v.double()
    return {k: (v / len(directories)).float() for k, v in total.items()}


def check_out(run_dir: Path, out: Path, *, force: bool) -> None:
    """``out`` must not be the run directory, one of its parents or inside a checkpoint of the
    run; an existing ``out`` is replaced only with ``force`` (and only if it is a checkpoint)."""
    run, target = run_dir.resolve(), out.resolve()
    if target == run or target in run.parents:
        raise AverageError(
            f"--out {out}: is the run directory {run_dir} or one of its parents; choose a new directory"
        )
    if run / "checkpoints" in target.parents or target == run / "checkpoints":
        raise AverageError(
            f"--out {out}: inside {run_dir}/checkpoints, which holds the run's own "
            "checkpoints; choose another directory"
        )
    if out.exists() or out.is_symlink():
        if not force:
            raise AverageError(f"--out {out}: already exists; pass --force to replace it")
        if not out.is_dir() or (any(out.iterdir()) and not (out / ckpt.MANIFEST).exists()):
            raise AverageError(
                f"--out {out}: exists and is not a checkpoint directory; --force replaces only a checkpoint"
            )


def average_run(run_dir: str | Path, *, last: int, out: str | Path, force: bool = False) -> list[Path]:
    """Average the last ``last`` step checkpoints of ``run_dir`` into checkpoint ``out``
    (written atomically); returns the checkpoints averaged."""
    run_dir, out = Path(run_dir), Path(out)
    if last < 1:
        raise AverageError(f"--last {last}: must be a positive number of checkpoints")
    if not run_dir.is_dir():
        raise AverageError(f"{run_dir}: no such run directory")
    check_out(run_dir, out, force=force)
    steps = ckpt.list_step_checkpoints(run_dir)
    if not steps:
        not_a_run(run_dir)
    if len(steps) < last:
        raise AverageError(f"{run_dir}: {len(steps)} checkpoints, fewer than --last {last}")
    chosen = steps[-last:]
    averaged = average(chosen)
    config = ckpt.read_config(chosen[-1])
    model = Transformer(ckpt.model_config(chosen[-1], config))
    ckpt.load_weights(model, averaged, source=f"average of {chosen[0]} .. {chosen[-1]}")
    config["averaged_from"] = [p.name for p in chosen]
    try:  # atomic: a failed write leaves --out as it was
        ckpt.save(out, model=model, config=config, spm_model=chosen[-1] / "spm.model")
    except OSError as e:
        raise AverageError(
            f"--out {out}: could not write the averaged checkpoint: {e.strerror or e} (nothing written)"
        ) from None
    return chosen


def not_a_run(run_dir: Path) -> None:
    """The AverageError for a directory without step checkpoints: one checkpoint, the checkpoints
    folder, or a run that wrote none yet."""
    if (run_dir / ckpt.MANIFEST).exists() or run_dir.name == "checkpoints":
        run = run_dir.resolve().parent if run_dir.name == "checkpoints" else run_dir.resolve().parent.parent
        what = "a checkpoint" if (run_dir / ckpt.MANIFEST).exists() else "the checkpoints folder of a run"
        raise AverageError(
            f"{run_dir}: is {what}, not a run directory; give the run directory {run} "
            "(nmt average RUN --last N averages RUN/checkpoints/step_*)"
        )
    raise AverageError(f"{run_dir}: no step checkpoints (RUN/checkpoints/step_*) to average")
