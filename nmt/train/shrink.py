"""Shrink and fine-tune (Shleifer & Rush 2020, "Pre-trained Summarization Distillation"), not in the
paper: a student that starts from its teacher's weights instead of at random. The student keeps the
teacher's d_model, vocabulary and embeddings and fewer layers, each a copy of one of the teacher's
(``layer_map``: spread over the teacher's depth, the first and the last kept; one layer: the first).
With a smaller ``d_ff`` each copied feed-forward network keeps the d_ff hidden units of largest
magnitude (``ffn_units``: structured magnitude pruning, the norm of a unit's ``fc1`` row times the
norm of its ``fc2`` column, a bound on how far the unit can move the layer's output per unit of
input; data-free, so the student's training recovers what the dropped units did). `nmt distill --shrink`
writes this student as a checkpoint and trains it on the distilled data with `nmt train --init`.

A student of random weights and a deep encoder learns slowly on little data: on Multi30k, the
`student` preset (6 + 2 layers) reached valid perplexity 23.8 after 3,000 updates where its 3 + 3
teacher had 22.4 after 1,000 (results/speed/distill/README.md). A shrunk student starts where the
teacher is.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from torch import Tensor

from .. import checkpoint as ckpt
from ..config import ConfigError, ModelConfig, to_dict
from ..model import Transformer


class ShrinkError(ConfigError):
    """A student that cannot be shrunk from its teacher (more layers than the teacher has)."""


def layer_map(n_teacher: int, n_student: int) -> list[int]:
    """The teacher layer each student layer copies: evenly spread, the first and the last kept
    (3 of 6: [0, 2, 5]... as round(i * (n_teacher - 1) / (n_student - 1))); one layer: [0]."""
    if not 1 <= n_student <= n_teacher:
        raise ShrinkError(
            f"a student of {n_student} layers from a teacher of {n_teacher}: give 1 to {n_teacher}"
        )
    if n_student == 1:
        return [0]
    return [round(i * (n_teacher - 1) / (n_student - 1)) for i in range(n_student)]


def ffn_units(fc1_weight: Tensor, fc2_weight: Tensor, d_ff: int) -> Tensor:
    """The ``d_ff`` hidden units of one feed-forward network to keep, ascending: those of largest
    ||fc1.weight[i, :]|| * ||fc2.weight[:, i]|| (fc1.weight (d_ff_teacher, d_model), fc2.weight
    (d_model, d_ff_teacher)); ties keep the lower index."""
    n_units = fc1_weight.shape[0]
    if not 1 <= d_ff <= n_units:
        raise ShrinkError(f"a student's d_ff of {d_ff} from a teacher's {n_units}: give 1 to {n_units}")
    score = fc1_weight.float().norm(dim=1) * fc2_weight.float().norm(dim=0)  # (d_ff_teacher,)
    order = torch.argsort(-score, stable=True)  # (d_ff_teacher,) largest first
    return order[:d_ff].sort().values  # (d_ff,)


def shrink(
    teacher: Transformer, *, n_encoder_layers: int, n_decoder_layers: int, d_ff: int | None = None
) -> Transformer:
    """A student of the teacher's configuration with these depths, every weight a copy of the
    teacher's: embeddings and everything outside the layers as they are, layer i of the encoder
    (decoder) the teacher's layer layer_map(...)[i]; with ``d_ff`` (None: the teacher's) each
    feed-forward network keeps ffn_units(...) of its teacher layer's hidden units."""
    d_ff = teacher.cfg.d_ff if d_ff is None else d_ff
    cfg: ModelConfig = dataclasses.replace(
        teacher.cfg, n_encoder_layers=n_encoder_layers, n_decoder_layers=n_decoder_layers, d_ff=d_ff
    )
    maps = {
        "encoder": layer_map(teacher.cfg.encoder_layers, n_encoder_layers),
        "decoder": layer_map(teacher.cfg.decoder_layers, n_decoder_layers),
    }
    student = Transformer(cfg)
    source = teacher.state_dict()
    state, keeps = {}, {}  # keeps: teacher layer -> its ffn_units, chosen once for fc1 and fc2
    for name in student.state_dict():
        parts = name.split(".")  # e.g. decoder.layers.0.fc1.weight
        if len(parts) > 2 and parts[1] == "layers":
            parts[2] = str(maps[parts[0]][int(parts[2])])
        state[name] = narrowed(source, parts, d_ff, keeps).clone()
    student.load_state_dict(state)
    return student


def narrowed(source: dict, parts: list[str], d_ff: int, keeps: dict) -> Tensor:
    """The teacher's tensor ``".".join(parts)``, its feed-forward hidden units cut to ffn_units(...)
    where d_ff is smaller: fc1.weight rows, fc1.bias, fc2.weight columns (fc2.bias is whole);
    ``keeps`` caches each teacher layer's units."""
    tensor = source[".".join(parts)]
    kind = ".".join(parts[3:])  # e.g. fc1.weight; "" outside the layers
    if kind not in ("fc1.weight", "fc1.bias", "fc2.weight"):
        return tensor
    layer = ".".join(parts[:3])
    fc1, fc2 = source[f"{layer}.fc1.weight"], source[f"{layer}.fc2.weight"]
    if fc1.shape[0] == d_ff:
        return tensor
    if layer not in keeps:
        keeps[layer] = ffn_units(fc1, fc2, d_ff)  # (d_ff,)
    keep = keeps[layer]
    return tensor[:, keep] if kind == "fc2.weight" else tensor[keep]  # (d_model, d_ff) / (d_ff, ...)


def write_shrunk(
    teacher_dir: str | Path,
    out: str | Path,
    *,
    n_encoder_layers: int,
    n_decoder_layers: int,
    d_ff: int | None = None,
) -> Path:
    """The shrunk student of the checkpoint ``teacher_dir`` as a checkpoint at ``out`` (its config
    the teacher's, with the student's model and ``shrunk_from``: the teacher, the layer maps and
    the teacher's d_ff)."""
    directory = ckpt.resolve_checkpoint(teacher_dir)
    teacher, config = ckpt.load_model(directory)
    student = shrink(teacher, n_encoder_layers=n_encoder_layers, n_decoder_layers=n_decoder_layers, d_ff=d_ff)
    record = {
        "path": str(directory),
        "encoder_layers": layer_map(teacher.cfg.encoder_layers, n_encoder_layers),
        "decoder_layers": layer_map(teacher.cfg.decoder_layers, n_decoder_layers),
        "d_ff": teacher.cfg.d_ff,
    }
    config = {k: v for k, v in config.items() if k != "averaged_from"}
    config.update(model=to_dict(student.cfg), shrunk_from=record)
    return ckpt.save(out, model=student, config=config, spm_model=directory / "spm.model")
