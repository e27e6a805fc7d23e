"""Adam and the learning-rate schedule of section 5.3 (`Schedule`: eq. 3 and the final linear decay)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..config import ModelConfig, TrainConfig


def inverse_sqrt_lr(step: int, *, d_model: int, warmup_steps: int, lr_scale: float = 1.0) -> float:
    """lrate = lr_scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)  (eq. 3).

    Linear warm-up for ``warmup_steps`` steps, then decay with the inverse square root of the step.
    Steps count from 1 (step 0 is treated as step 1)."""
    step = max(step, 1)
    return lr_scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def linear_decay(step: int, *, decay_start: int, decay_end: int) -> float:
    """The factor on eq. 3 of a run that ends with a linear decay (train.decay_fraction; not in the
    paper): 1 up to update ``decay_start``, then falling linearly to 1/(decay_end - decay_start) at
    update ``decay_end``, the run's last. ``decay_end`` = 0: no decay (the paper's schedule)."""
    if not decay_end or step <= decay_start:
        return 1.0
    return max(decay_end - step + 1, 0) / (decay_end - decay_start)


@dataclass
class Schedule:
    """The learning rate of every update, as fairseq's lr schedulers give it (`step_update`): eq. 3
    (``lr_scale`` times d_model^-0.5 * min(update^-0.5, update * warmup_steps^-1.5)), times the final
    linear decay of train.decay_fraction once it has started (not in the paper).

    The decay starts when the run has used ``1 - decay_fraction`` of max_steps or of max_time
    (`decay_due`, rank 0's view: the job decides once for all ranks), over the window `start_decay`
    fixes; its state (``decay_start``, ``decay_end``: 0 = not started) is saved with the checkpoint
    (`to_dict`, `load_dict`). Reaching ``decay_end`` ends the run (`finished`)."""

    d_model: int
    warmup_steps: int
    lr_scale: float = 1.0
    decay_fraction: float = 0.0
    max_steps: int = 0
    max_time: float = 0.0  # minutes
    decay_start: int = 0
    decay_end: int = 0

    @classmethod
    def of(cls, model_cfg: ModelConfig, cfg: TrainConfig) -> "Schedule":
        return cls(
            d_model=model_cfg.d_model,
            warmup_steps=cfg.warmup_steps,
            lr_scale=cfg.lr_scale,
            decay_fraction=cfg.decay_fraction,
            max_steps=cfg.max_steps,
            max_time=cfg.max_time,
        )

    def step_update(self, update: int) -> float:
        """The learning rate of update ``update`` (counted from 1)."""
        lr = inverse_sqrt_lr(
            update, d_model=self.d_model, warmup_steps=self.warmup_steps, lr_scale=self.lr_scale
        )
        return lr * linear_decay(update, decay_start=self.decay_start, decay_end=self.decay_end)

    def decay_due(self, *, update: int, elapsed: float) -> bool:
        """Whether the decay starts after update ``update`` (``elapsed`` training seconds): it has not
        started, and the run has used ``1 - decay_fraction`` of max_steps or of max_time."""
        keep = 1.0 - self.decay_fraction
        return bool(
            self.decay_fraction
            and not self.decay_end
            and (
                (self.max_steps and update >= keep * self.max_steps)
                or (self.max_time and elapsed >= keep * self.max_time * 60)
            )
        )

    def start_decay(self, update: int) -> None:
        """Fix the decay that starts after update ``update``: it ends at max_steps when the steps limit
        started it, else after as many updates as the remaining time holds at the rate so far
        (update / (1 - decay_fraction) in all), or at max_steps."""
        keep = 1.0 - self.decay_fraction
        if self.max_steps and update >= keep * self.max_steps:
            end = self.max_steps
        else:  # max_time started it
            end = math.ceil(update / keep)
            end = min(end, self.max_steps) if self.max_steps else end
        self.decay_start, self.decay_end = update, max(end, update + 1)

    def finished(self, update: int) -> bool:
        """Whether update ``update`` is the last of a decay under way (the run stops there)."""
        return bool(self.decay_end) and update >= self.decay_end

    def to_dict(self) -> dict:
        """The state a checkpoint keeps (the rest comes from the configuration)."""
        return {"decay_start": self.decay_start, "decay_end": self.decay_end}

    def load_dict(self, state: dict) -> None:
        """The state of `to_dict` (a checkpoint saved before the decay existed has none: not started)."""
        self.decay_start, self.decay_end = int(state.get("decay_start", 0)), int(state.get("decay_end", 0))


def build_adam(
    params, *, betas: tuple[float, float], eps: float, weight_decay: float = 0.0
) -> torch.optim.Adam:
    """The paper's optimizer: Adam with beta1=0.9, beta2=0.98, eps=1e-9; lr is set per step."""
    # fused: one kernel per tensor, on CPU too (torch >= 2.4)
    return torch.optim.Adam(list(params), lr=0.0, betas=betas, eps=eps, weight_decay=weight_decay, fused=True)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
