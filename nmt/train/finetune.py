"""Fine-tuning and continued training: a new run that starts from a trained model's weights
(`nmt train DATA --out RUN --init CHECKPOINT`).

What carries over and what starts anew:

- the model configuration comes from the checkpoint; options that would change the shape or the
  function of its weights are refused with the reason (only the dropouts may change);
- the weights come from the checkpoint; the optimizer state, the schedule of eq. 3 and the step
  counter start anew (``keep_optimizer`` also takes Adam's moments from the checkpoint);
- the data's vocabulary must be the checkpoint's, id for id, and so must the target side's own
  SentencePiece model where the checkpoint has one (target_spm.model, nmt.vocab; prepare the new
  data with ``nmt prepare ... --spm-model CHECKPOINT`` to get both);
- the run records where it started from (path and sha256 of the weights) in its config.json, so
  that it can be reproduced; once it has a checkpoint of its own, ``--resume`` continues from that,
  exactly as any run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import checkpoint as ckpt
from ..config import ConfigError, ModelConfig, apply_overrides, to_dict
from ..vocab import SPM, TARGET_SPM, load_spm

# the model fields a fine-tuning run may change: regularisation only, never a weight's shape or meaning
CHANGEABLE = ("dropout", "attention_dropout", "activation_dropout")


class InitError(ConfigError):
    """A checkpoint that cannot start this run (its vocabulary or its model differs)."""


@dataclass(frozen=True)
class InitFrom:
    """The checkpoint a run starts from, as its config.json records it."""

    directory: Path
    sha256: str  # of model.safetensors
    keep_optimizer: bool = False

    def record(self) -> dict:
        return {
            "path": str(self.directory.resolve()),
            "sha256": self.sha256,
            "keep_optimizer": self.keep_optimizer,
        }


def open_init(path: str | Path, *, keep_optimizer: bool = False) -> InitFrom:
    """The checkpoint (or a run directory's ``best``) to start from, verified against its manifest."""
    directory = ckpt.resolve_checkpoint(path)
    ckpt.verify(directory)
    if keep_optimizer and not (directory / "optimizer.safetensors").exists():
        raise InitError(
            f"--init-optimizer: {directory} holds no optimizer state (an averaged checkpoint "
            "has none); start from a step checkpoint, or leave the option out"
        )
    return InitFrom(directory, ckpt.sha256_file(directory / "model.safetensors"), keep_optimizer)


def init_model_config(
    init: InitFrom, overrides: dict[str, str], *, config_model: dict | None = None
) -> ModelConfig:
    """The checkpoint's model configuration with the dropouts of ``overrides`` (--model.*) and of a
    --config file's ``model:`` section applied; any other field that differs is refused."""
    saved = ckpt.model_config(init.directory)
    for source, values in (("--config model:", config_model or {}), ("--model.", overrides)):
        asked = apply_overrides(saved, {k: str(v) for k, v in values.items()}, section="model")
        for field, value in to_dict(asked).items():
            if field not in CHANGEABLE and value != getattr(saved, field):
                name = f"--model.{field}" if source == "--model." else f"{source} {field}"
                raise InitError(
                    f"{name}={value!r}: fine-tuning keeps the model of {init.directory} "
                    f"({field}={getattr(saved, field)!r}); only {', '.join(CHANGEABLE)} may change "
                    "(a different value would change the shape or the meaning of its weights)"
                )
        saved = apply_overrides(
            saved, {k: str(v) for k, v in values.items() if k in CHANGEABLE}, section="model"
        )
    return saved


def check_vocabulary(data_dir: str | Path, init: InitFrom) -> None:
    """The data's SentencePiece model must be the checkpoint's, piece for piece and id for id (and
    its target side's, vocabulary_difference)."""
    try:
        difference = vocabulary_difference(data_dir, init.directory)
    except ValueError as e:  # unreadable spm.model
        raise ckpt.CheckpointError(str(e)) from None
    if difference:
        raise InitError(
            f"{difference}; prepare the data with the checkpoint's vocabulary: "
            f"nmt prepare ... --spm-model {init.directory}"
        )


def vocabulary_difference(data_dir: str | Path, model_dir: str | Path) -> str | None:
    """The first difference between the SentencePiece models of a DATA_DIR and a checkpoint (their
    sizes, else the first id whose piece differs, else the target side's own model: one has a
    target_spm.model the other lacks or has otherwise), or None when they are the same vocabulary;
    ValueError naming an unreadable spm.model or target_spm.model."""
    data_sp, model_sp = Path(data_dir) / SPM, Path(model_dir) / SPM
    a, b = load_spm(data_dir), load_spm(model_dir)
    if a.get_piece_size() != b.get_piece_size():
        return f"{data_sp}: {a.get_piece_size()} pieces, but {model_sp} has {b.get_piece_size()}"
    for i in range(a.get_piece_size()):
        if a.id_to_piece(i) != b.id_to_piece(i):
            return f"{data_sp}: id {i} is {a.id_to_piece(i)!r}, but in {model_sp} it is {b.id_to_piece(i)!r}"
    own = [
        (Path(d) / TARGET_SPM) if (Path(d) / TARGET_SPM).is_file() else None for d in (data_dir, model_dir)
    ]
    targets = [None if f is None else load_spm(f.parent, side="target").serialized_model_proto() for f in own]
    if targets[0] != targets[1]:
        what = [f"no {TARGET_SPM}" if f is None else str(f) for f in own]
        return (
            f"{data_dir}: its target side's SentencePiece model ({what[0]}) is not that of "
            f"{model_dir} ({what[1]})"
        )
    return None
