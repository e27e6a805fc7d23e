"""What exact resume restores besides the weights: how far the run is (`Progress`), the random number
generators and Adam's state, in forms a checkpoint holds without pickles (JSON; base64 text in JSON;
flat named tensors in safetensors plus JSON-able parameter groups)."""

from __future__ import annotations

import base64
from dataclasses import asdict, dataclass

import numpy as np
import torch


@dataclass
class Progress:
    """How far a run is, saved and restored whole (``trainer_state.json``, whose keys are these
    fields' names). The data position (epoch, batch) is the sampler's
    state and the decay window the `optim.Schedule`'s; both are saved beside these."""

    update: int = 0  # updates (optimizer steps) done
    best: float | None = None  # the best validation score so far, of best_metric (BLEU or the loss)
    best_metric: str = "loss"  # what `best` measures (train.best_metric; `stopping.better` compares)
    best_step: int | None = None  # the update whose checkpoint `best` holds (or is being given)
    since_best: int = 0  # validations since `best` last improved (train.patience)
    validation_pending: bool = False  # a stop signal cut the validation of the last checkpoint short
    elapsed: float = 0.0  # training seconds, counted on across resumes
    tokens_seen: int = 0  # target tokens of every update on every rank

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, state: dict, *, best_metric: str = "loss") -> "Progress":
        """A `to_dict`, or the state of a checkpoint written before best_step, since_best and
        validation_pending were saved (they start at None, 0 and False), or before best_metric was:
        its ``best`` is of the run's ``best_metric`` (train.best_metric), saved as -BLEU for bleu; its
        update count is `saved_update`'s. A missing or mistyped counter raises KeyError, TypeError or
        ValueError."""
        best, best_step = state["best"], state.get("best_step")
        best = None if best is None else float(best)
        if "best_metric" in state:
            best_metric = str(state["best_metric"])
        elif best is not None and best_metric == "bleu":  # the old layout's best: lower was better
            best = -best
        return cls(
            update=saved_update(state),
            best=best,
            best_metric=best_metric,
            best_step=None if best_step is None else int(best_step),
            since_best=int(state.get("since_best", 0)),
            validation_pending=bool(state.get("validation_pending", False)),
            elapsed=float(state["elapsed"]),
            tokens_seen=int(state["tokens_seen"]),
        )


def saved_update(saved: dict) -> int:
    """The update count (optimizer steps done) of a ``trainer_state.json`` or a ``metrics.jsonl``
    record: its "update", or its "step" as runs wrote it before. KeyError if it has neither."""
    return int(saved["update"] if "update" in saved else saved["step"])


def _b64(t: torch.Tensor) -> str:
    return base64.b64encode(t.numpy().tobytes()).decode()


def _unb64(s: str) -> torch.Tensor:
    return torch.from_numpy(np.frombuffer(base64.b64decode(s), dtype=np.uint8).copy())


def rng_state() -> dict:
    state = {"torch": _b64(torch.get_rng_state())}
    if torch.cuda.is_available():
        state["cuda"] = [_b64(s) for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(_unb64(state["torch"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_unb64(s) for s in state["cuda"]])


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """Adam state as flat named tensors (safetensors) plus JSON-able param_groups."""
    sd = optimizer.state_dict()
    tensors = {f"{idx}.{key}": value for idx, st in sd["state"].items() for key, value in st.items()}
    return tensors, {"param_groups": sd["param_groups"]}


def load_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    state: dict[int, dict] = {}
    for name, value in tensors.items():
        idx, key = name.split(".", 1)
        state.setdefault(int(idx), {})[key] = value
    groups = meta["param_groups"]
    for g in groups:
        g["betas"] = tuple(g["betas"])
    optimizer.load_state_dict({"state": state, "param_groups": groups})
