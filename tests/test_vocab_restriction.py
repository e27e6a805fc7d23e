"""nmt/infer/vocab_restriction.py: a model searched over part of the target vocabulary gives the full
model's logits of those ids, for the batch's union and for each sentence's own ids."""

from __future__ import annotations

import pytest
import torch

from nmt.infer.translate import Translator
from nmt.infer.vocab_restriction import ShortlistModel


@pytest.mark.parametrize("precision", ["fp32", "int8", "plain"])
def test_restricted_projection_gives_the_full_logits_of_the_union(trained_tiny_run, precision):
    """The output layer over rows U (packed float32, int8, plain tied) gives the full layer's columns
    U; positions in, positions out."""
    t = Translator.load(trained_tiny_run, device="cpu", precision="int8" if precision == "int8" else "fp32")
    model = t.model
    if precision == "plain":  # unpacked, tied: the embedding matrix itself
        from nmt.checkpoint import load_model

        model = load_model(trained_tiny_run, device="cpu")[0].eval()
        assert model.decoder.output_projection is None
    rows = torch.tensor([0, 1, 2, 3, 7, 20, 21, 50, 99])
    src = torch.tensor([[5, 9, 30, 3], [11, 12, 3, 0]])
    with torch.inference_mode():
        memory = model.encode(src)
        full, _ = model.decode_step(torch.tensor([[2], [2]]), memory, None)  # (2, 1, W)
        part, _ = ShortlistModel(model, rows).decode_step(torch.tensor([[2], [2]]), model.encode(src), None)
        assert part.shape == (2, 1, len(rows))
        torch.testing.assert_close(part, full[:, :, rows], rtol=1e-5, atol=1e-5)
        projection, layer = ShortlistModel(model, rows).projection, model.decoder.output_projection
        assert getattr(projection, "kernel", None) == getattr(layer, "kernel", None)  # no new probe
        pos = torch.tensor([[4], [6]])  # positions 4, 6 of U = ids 7, 21
        _, cache = model.decode_step(torch.tensor([[2], [2]]), memory, None)
        full2, _ = model.decode_step(rows[pos], memory, cache)
        sm = ShortlistModel(model, rows)
        memory2 = model.encode(src)
        _, c2 = sm.decode_step(torch.tensor([[2], [2]]), memory2, None)
        part2, _ = sm.decode_step(pos, memory2, c2)
        torch.testing.assert_close(part2, full2[:, :, rows], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_sentence_restriction_gives_each_sentence_the_full_logits_of_its_own_ids(trained_tiny_run, precision):
    """Sentence i over its own ids (padded with -inf): the full layer's columns ids[i], for beam
    rows sharing a sentence's memory, after the search reorders them, positions in and out. int8:
    the rows are dequantized (a float32 product, where the int8 layer also quantizes its input), so
    only as close as int8 is to float32."""
    from nmt.infer.vocab_restriction import sentence_model

    tol = dict(rtol=1e-5, atol=1e-5) if precision == "fp32" else dict(rtol=0.0, atol=0.1)
    model = Translator.load(trained_tiny_run, device="cpu", precision=precision).model
    ids = torch.tensor([[0, 1, 2, 3, 7, 20, 21], [0, 1, 2, 3, 9, 0, 0]])  # (B, U), sentence 2 padded
    valid = torch.tensor([[True] * 7, [True] * 5 + [False] * 2])
    src = torch.tensor([[5, 9, 30, 3], [11, 12, 3, 0]])
    sm = sentence_model(model, ids, valid)
    with torch.inference_mode():
        memory, rows = model.encode(src), torch.tensor([0, 0, 1, 1])  # two beams a sentence
        full, cache = model.decode_step(torch.tensor([[2]] * 4), memory.reorder(rows), None)  # (4, 1, W)
        state = sm.encode(src).reorder(rows)
        part, c2 = sm.decode_step(torch.tensor([[2]] * 4), state, None)  # (4, 1, U)
        expected = torch.stack([full[r, 0, ids[s]] for r, s in enumerate(rows.tolist())])  # (4, U)
        expected[2:, 5:] = float("-inf")
        torch.testing.assert_close(part[:, 0], expected, **tol)
        swap = torch.tensor([1, 0, 3, 2])  # the search reorders beams within each sentence
        pos = torch.tensor([[5], [4], [4], [3]])  # positions: ids 20, 7 | 9, 3
        full2, _ = model.decode_step(
            ids[rows][swap].gather(1, pos), memory.reorder(rows[swap]), cache.reorder(swap)
        )
        part2, _ = sm.decode_step(pos, state.reorder(swap), c2.reorder(swap))
        expected2 = torch.stack([full2[r, 0, ids[s]] for r, s in enumerate(rows[swap].tolist())])
        expected2[2:, 5:] = float("-inf")
        torch.testing.assert_close(part2[:, 0], expected2, **tol)
