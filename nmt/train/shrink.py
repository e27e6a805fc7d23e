"""Shrink and fine-tune (Shleifer & Rush 2020, "Pre-trained Summarization Distillation"), not in the
paper: a student that starts from its teacher's weights instead of at random. The student keeps the
teacher's width, vocabulary and embeddings and fewer layers, each a copy of one of the teacher's
(``layer_map``: spread over the teacher's depth, the first and the last kept; one layer: the first).
`nmt distill --shrink` writes this student as a checkpoint and trains it on the distilled data
with `nmt train --init`.

A student of random weights and a deep encoder learns slowly on little data: on Multi30k, the
`student` preset (6 + 2 layers) reached valid perplexity 23.8 after 3,000 updates where its 3 + 3
teacher had 22.4 after 1,000 (results/speed/distill/README.md). A shrunk student starts where the
teacher is.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

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


def shrink(teacher: Transformer, *, n_encoder_layers: int, n_decoder_layers: int) -> Transformer:
    """A student of the teacher's configuration with these depths, every weight a copy of the
    teacher's: embeddings and everything outside the layers as they are, layer i of the encoder
    (decoder) the teacher's layer layer_map(...)[i]."""
    cfg: ModelConfig = dataclasses.replace(
        teacher.cfg, n_encoder_layers=n_encoder_layers, n_decoder_layers=n_decoder_layers
    )
    maps = {
        "encoder": layer_map(teacher.cfg.encoder_layers, n_encoder_layers),
        "decoder": layer_map(teacher.cfg.decoder_layers, n_decoder_layers),
    }
    student = Transformer(cfg)
    source = teacher.state_dict()
    state = {}
    for name in student.state_dict():
        parts = name.split(".")  # e.g. decoder.layers.0.fc1.weight
        if len(parts) > 2 and parts[1] == "layers":
            parts[2] = str(maps[parts[0]][int(parts[2])])
        state[name] = source[".".join(parts)].clone()
    student.load_state_dict(state)
    return student


def write_shrunk(
    teacher_dir: str | Path, out: str | Path, *, n_encoder_layers: int, n_decoder_layers: int
) -> Path:
    """The shrunk student of the checkpoint ``teacher_dir`` as a checkpoint at ``out`` (its config
    the teacher's, with the student's model and ``shrunk_from``: the teacher and the layer maps)."""
    directory = ckpt.resolve_checkpoint(teacher_dir)
    teacher, config = ckpt.load_model(directory)
    student = shrink(teacher, n_encoder_layers=n_encoder_layers, n_decoder_layers=n_decoder_layers)
    record = {
        "path": str(directory),
        "encoder_layers": layer_map(teacher.cfg.encoder_layers, n_encoder_layers),
        "decoder_layers": layer_map(teacher.cfg.decoder_layers, n_decoder_layers),
    }
    config = {k: v for k, v in config.items() if k != "averaged_from"}
    config.update(model=to_dict(student.cfg), shrunk_from=record)
    return ckpt.save(out, model=student, config=config, spm_model=directory / "spm.model")
