"""Shrink and fine-tune (nmt/train/shrink.py): layer maps spread over the teacher's depth, a student
of the teacher's depths that is the teacher, and a student of fewer layers whose layer i is the
teacher's layer layer_map(...)[i], checked on a 4 + 4 teacher (where the map moves layers: the
tiny preset's 2 + 2 maps a 1-layer student to layer 0, which any student's first layer already is).
`nmt distill --shrink` end to end: tests/test_distill.py."""

import copy
import dataclasses

import pytest
import torch
from torch import nn

from nmt.checkpoint import load_model, save
from nmt.config import tiny
from nmt.model import Transformer
from nmt.train.shrink import ShrinkError, layer_map, shrink, write_shrunk

SRC = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])
TGT = torch.tensor([[2, 5, 6], [2, 7, 8]])


def test_shrinking_to_the_teachers_depths_is_the_teacher_and_layer_maps_spread_over_it(tiny_checkpoint):
    assert layer_map(6, 3) == [0, 2, 5] and layer_map(3, 2) == [0, 2] and layer_map(6, 1) == [0]
    assert layer_map(4, 4) == [0, 1, 2, 3]
    with pytest.raises(ShrinkError, match="give 1 to 3"):
        layer_map(3, 4)
    t, _ = load_model(tiny_checkpoint)
    same = shrink(t, n_encoder_layers=t.cfg.encoder_layers, n_decoder_layers=t.cfg.decoder_layers).eval()
    assert torch.equal(same(SRC, TGT), t(SRC, TGT))
    small = shrink(t, n_encoder_layers=1, n_decoder_layers=1)
    assert small.encoder.embed_tokens.weight.data_ptr() == small.decoder.embed_tokens.weight.data_ptr()


def test_a_shrunk_students_layers_are_the_mapped_layers_of_a_deeper_teacher(tiny_checkpoint, tmp_path):
    """A 4 + 4 teacher shrunk to 2 + 3: encoder layers [0, 3], decoder layers [0, 2, 3] of the
    teacher, weight for weight; everything outside the layers the teacher's; the student computes
    what the teacher computes with only those layers; the checkpoint records the maps."""
    torch.manual_seed(0)
    cfg = dataclasses.replace(tiny(100), n_encoder_layers=4, n_decoder_layers=4)
    teacher_dir = save(
        tmp_path / "teacher",
        model=Transformer(cfg),
        spm_model=tiny_checkpoint / "spm.model",
        config={"model": dataclasses.asdict(cfg), "train": {}, "data": {}},
    )
    out = write_shrunk(teacher_dir, tmp_path / "student", n_encoder_layers=2, n_decoder_layers=3)
    teacher, _ = load_model(teacher_dir)
    student, config = load_model(out)
    maps = {"encoder": [0, 3], "decoder": [0, 2, 3]}
    assert {side: config["shrunk_from"][f"{side}_layers"] for side in maps} == maps
    for side, mapped in maps.items():
        layers = getattr(student, side).layers
        assert len(layers) == len(mapped)
        for i, j in enumerate(mapped):
            want, got = getattr(teacher, side).layers[j].state_dict(), layers[i].state_dict()
            assert got.keys() == want.keys()
            assert all(torch.equal(got[k], want[k]) for k in want), f"{side} layer {i} is not teacher's {j}"
    teacher_state = teacher.state_dict()
    outside = {k: v for k, v in student.state_dict().items() if ".layers." not in k}
    assert outside and all(torch.equal(v, teacher_state[k]) for k, v in outside.items())
    cut = copy.deepcopy(teacher).eval()
    for side, mapped in maps.items():
        getattr(cut, side).layers = nn.ModuleList(getattr(cut, side).layers[j] for j in mapped)
    with torch.inference_mode():
        assert torch.equal(student.eval()(SRC, TGT), cut(SRC, TGT))
        assert not torch.equal(student(SRC, TGT), teacher.eval()(SRC, TGT))


def test_a_narrower_student_keeps_the_feed_forward_units_of_largest_magnitude(tiny_checkpoint, tmp_path):
    """d_ff narrowed: each feed-forward network keeps the units of largest ||fc1 row|| * ||fc2
    column||. A teacher whose other units have a zero fc2 column (they add nothing) and a student
    of its non-zero units compute the same (up to fp32 summation order over d_ff terms); the
    checkpoint records the teacher's d_ff; a d_ff above the teacher's is refused."""
    torch.manual_seed(0)
    teacher, _ = load_model(tiny_checkpoint)
    teacher = copy.deepcopy(teacher).eval()
    d_ff = teacher.cfg.d_ff
    kept = {}
    for side in ("encoder", "decoder"):
        for i, layer in enumerate(getattr(teacher, side).layers):
            keep = torch.randperm(d_ff)[: d_ff // 2].sort().values
            dropped = torch.ones(d_ff, dtype=torch.bool)
            dropped[keep] = False
            with torch.no_grad():
                layer.fc2.weight[:, dropped] = 0.0
            kept[side, i] = keep
    n_enc, n_dec = teacher.cfg.encoder_layers, teacher.cfg.decoder_layers
    student = shrink(teacher, n_encoder_layers=n_enc, n_decoder_layers=n_dec, d_ff=d_ff // 2).eval()
    assert student.cfg.d_ff == d_ff // 2
    for (side, i), keep in kept.items():
        got, want = getattr(student, side).layers[i], getattr(teacher, side).layers[i]
        assert torch.equal(got.fc1.weight, want.fc1.weight[keep]) and torch.equal(
            got.fc1.bias, want.fc1.bias[keep]
        )
        assert torch.equal(got.fc2.weight, want.fc2.weight[:, keep]) and torch.equal(
            got.fc2.bias, want.fc2.bias
        )
    with torch.inference_mode():
        torch.testing.assert_close(student(SRC, TGT), teacher(SRC, TGT), rtol=0, atol=d_ff * 2e-7)
    with pytest.raises(ShrinkError, match=f"give 1 to {d_ff}"):
        shrink(teacher, n_encoder_layers=1, n_decoder_layers=1, d_ff=d_ff + 1)
    out = write_shrunk(tiny_checkpoint, tmp_path / "narrow", n_encoder_layers=1, n_decoder_layers=1, d_ff=8)
    narrow, config = load_model(out)
    assert narrow.cfg.d_ff == 8 and config["shrunk_from"]["d_ff"] == d_ff
