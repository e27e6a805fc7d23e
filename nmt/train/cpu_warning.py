"""The warning that a paper-sized model trains on the CPU: the first update's measured time, projected
to the run's limits (train.max_steps, bounded by train.max_time).

The paper's base model trains about 200 target tokens/s on a 2-core CPU (recipes/multi30k-en-de.yaml):
one update of 25,000 target tokens takes about 2 minutes there, and base's 100,000 updates months."""

from __future__ import annotations

from ..config import TrainConfig

# A model counts as paper-sized from this many parameters in its encoder and decoder layers (the
# embeddings aside, which cost little time per token): base has 44.1M, big 176.2M; the small preset
# 5.5M and tiny 0.1M, which a CPU trains in hours.
PAPER_SIZED_LAYER_PARAMETERS = 20_000_000


def paper_sized(layer_parameters: int) -> bool:
    """Whether a model with this many encoder + decoder layer parameters is base-sized or larger."""
    return layer_parameters >= PAPER_SIZED_LAYER_PARAMETERS


def _duration(seconds: float) -> str:
    """'42 s', '12 min', '5.3 h', '145 days'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


def cpu_warning(*, cfg: TrainConfig, seconds_per_update: float, update: int, tokens: int) -> str:
    """The warning's two lines, from the measured time of update ``update`` (the first of this process, of
    ``tokens`` target tokens): the time per update and what the run's limits make of it."""
    if cfg.max_steps:
        updates = max(cfg.max_steps - update + 1, 1)  # this one and those left to max_steps
        total = _duration(updates * seconds_per_update)
        run = f"{updates:,} updates to max_steps={cfg.max_steps:,} take ~{total}"
        if cfg.max_time and updates * seconds_per_update > cfg.max_time * 60:
            held = int(cfg.max_time * 60 / max(seconds_per_update, 1e-9))
            run += f", but max_time={cfg.max_time:g} min stops the run after ~{held:,}"
    elif cfg.max_time:
        updates = int(cfg.max_time * 60 / max(seconds_per_update, 1e-9))
        run = f"max_time={cfg.max_time:g} min holds ~{updates:,} updates"
    else:  # max_epochs only: its length in updates is not known here
        run = f"max_epochs={cfg.max_epochs} sets the length"
    return (
        f"warning: a paper-sized model on the CPU: update {update} took {_duration(seconds_per_update)} "
        f"({tokens:,} target tokens); {run}.\n"
        "  Train it on GPUs (docs/gpu.md), or choose --preset small for a CPU (docs/training.md)."
    )
