"""nmt/cache.py, the decoder cache layout: cross-attention keys/values held once per sentence and
shared by its beams, self-attention keys/values in preallocated buffers written in place. Every
layout must give the logits of the full (teacher-forced) forward pass."""

import pytest
import torch
from conftest import tol

from nmt.cache import shared_rows, take_rows_
from nmt.config import tiny
from nmt.model import Transformer

# kernel- and precision-sensitive: `make test` runs this file again on the AVX2-only path (conftest)
pytestmark = pytest.mark.numerics


# The models here run in float32 whatever `auto` picks (no autocast), on any kernel ISA. A cached step
# and the full forward sum the same products in other orders and blockings; a logit (|logit| <= ~5 for
# these random tiny(40) models) is reached through 2 layers of d_model + d_ff + up to 20 attended
# positions of accumulation and the 40-way output projection.
ATOL = tol(torch.float32, 2 * (64 + 128 + 20) + 64, scale=5.0)


def model_and_data():
    torch.manual_seed(0)
    model = Transformer(tiny(40)).eval()
    src = torch.tensor([[5, 6, 7, 3, 0], [9, 9, 8, 7, 3], [4, 3, 0, 0, 0]])  # (3, S)
    tgt = torch.randint(4, 40, (3 * 2, 20))  # (3 sentences * 2 beams, T)
    return model, src, tgt


def test_shared_rows():
    def call(indices, group):
        rows, new_group = shared_rows(torch.tensor(indices), group)
        return rows.tolist(), new_group

    assert call([0, 0, 0, 1, 1, 1], 1) == ([0, 1], 3)  # expanding 2 sentences to 3 beams
    assert call([5, 4, 11, 10, 9, 8], 2) == ([2, 5, 4], 2)  # beams reordered, sentences dropped/moved
    assert call([4, 5, 4, 4, 10, 11, 9, 9], 2) == ([2, 2, 2, 2, 5, 5, 4, 4], 1)  # unequal runs: no sharing


@torch.no_grad()
def test_beams_share_cross_attention_and_match_the_full_forward():
    model, src, tgt = model_and_data()
    expand = torch.arange(3).repeat_interleave(2)  # (6,) each sentence's 2 beam rows
    memory = model.encode(src).reorder(expand)
    assert memory.group == 2 and memory.out.size(0) == 3  # not copied per beam
    full = model(src[expand], tgt)  # (6, T, W) every row with its own copy of the memory
    cache, steps = None, []
    for t in range(tgt.size(1)):  # 20 steps: past the initial capacity of 16 (the buffers grow)
        logits, cache = model.decode_step(tgt[:, t : t + 1], memory, cache)
        steps.append(logits)
    assert cache.group == 2 and cache.layers[0].cross_k.size(0) == 3 and cache.capacity >= 20
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=ATOL, rtol=0)


@torch.no_grad()
def test_shared_cache_after_beam_reorder_and_dropping_a_sentence():
    model, src, tgt = model_and_data()
    expand = torch.arange(3).repeat_interleave(2)
    memory = model.encode(src).reorder(expand)
    cache = None
    for t in range(4):
        _, cache = model.decode_step(tgt[:, t : t + 1], memory, cache)
    # beam reordering within sentences (row 1 takes beam 0's prefix) and sentence 1 dropped
    rows = torch.tensor([0, 0, 5, 4])  # (4,) = sentences 0 and 2, 2 beams each
    cache, memory = cache.reorder(rows), memory.reorder(rows)
    assert cache.group == 2 and cache.layers[0].cross_k.size(0) == 2 and memory.out.size(0) == 2
    tgt2 = torch.cat([tgt[rows, :4], tgt[:4, 4:]], dim=1)  # (4, T) continue with new tokens
    steps = []
    for t in range(4, 8):
        logits, cache = model.decode_step(tgt2[:, t : t + 1], memory, cache)
        steps.append(logits)
    full = model(src[expand[rows]], tgt2[:, :8])
    torch.testing.assert_close(torch.cat(steps, 1), full[:, 4:], atol=ATOL, rtol=0)
    # rows that do not come in equal runs per sentence fall back to one memory row each
    mixed = cache.reorder(torch.tensor([0, 2, 1]))
    assert mixed.group == 1 and mixed.layers[0].cross_k.size(0) == 3
    logits, _ = model.decode_step(tgt2[[0, 2, 1], 8:9], memory.reorder(torch.tensor([0, 2, 1])), mixed)
    torch.testing.assert_close(
        logits[:, 0], model(src[expand[rows]][[0, 2, 1]], tgt2[[0, 2, 1], :9])[:, 8], atol=ATOL, rtol=0
    )


@torch.no_grad()
def test_extending_one_cache_twice_does_not_overwrite_the_first_branch():
    """Steps write into shared buffers; a second step from the same cache must copy first."""
    model, src, tgt = model_and_data()
    memory = model.encode(src)
    _, cache = model.decode_step(tgt[:3, :3], memory, None)
    a, cache_a = model.decode_step(tgt[:3, 3:4], memory, cache)
    b, cache_b = model.decode_step(tgt[:3, 4:5], memory, cache)  # another token at position 3
    a2, _ = model.decode_step(tgt[:3, 5:6], memory, cache_a)
    ref_a = model(src, torch.cat([tgt[:3, :4], tgt[:3, 5:6]], dim=1))
    ref_b = model(src, torch.cat([tgt[:3, :3], tgt[:3, 4:5]], dim=1))
    torch.testing.assert_close(a2[:, 0], ref_a[:, 4], atol=ATOL, rtol=0)
    torch.testing.assert_close(b[:, 0], ref_b[:, 3], atol=ATOL, rtol=0)


@pytest.mark.parametrize(
    "indices", [[0, 1, 2, 3, 4, 5], [1, 0, 2, 2, 5, 4], [0, 0, 5, 4], [4, 5, 2, 3], [3, 3, 1], []]
)
@pytest.mark.parametrize("filled", [None, 3])
def test_take_rows_in_place_equals_index_select(indices, filled):
    """Rows swapped, repeated, dropped, moved into gaps: the same rows as index_select (within
    ``filled`` positions of dimension 1), in the same storage, first N' rows."""
    x = torch.randn(6, 5, 2, 4)  # (N, C, H, K)
    want = x.index_select(0, torch.tensor(indices, dtype=torch.long))
    ptr = x.data_ptr()
    got = take_rows_(x, torch.tensor(indices, dtype=torch.long), filled)
    assert got.shape == want.shape and (got.data_ptr() == ptr or not indices)  # a view of the same buffer
    keep = slice(None) if filled is None else slice(0, filled)
    torch.testing.assert_close(got[:, keep], want[:, keep], atol=0, rtol=0)


def test_take_rows_falls_back_to_a_copy_when_rows_grow():
    x = torch.randn(2, 3)
    got = take_rows_(x, torch.tensor([0, 0, 1, 1]))  # N' > N: new tensor
    assert got.data_ptr() != x.data_ptr()
    torch.testing.assert_close(got, x[[0, 0, 1, 1]], atol=0, rtol=0)


@torch.no_grad()
@pytest.mark.parametrize("rows", [[1, 0, 2, 2, 5, 4], [0, 0, 5, 4], [4, 5, 2, 3], [5, 4]])
def test_in_place_reorder_equals_reorder(rows):
    """``reorder_`` (beam search's, in place in the buffers) continues decoding with the logits of
    ``reorder`` and of the full forward pass, and keeps the buffers (no new allocation)."""
    model, src, tgt = model_and_data()
    expand = torch.arange(3).repeat_interleave(2)
    rows = torch.tensor(rows)
    results = []
    for in_place in (False, True):
        memory, cache = model.encode(src).reorder(expand), None
        for t in range(4):
            _, cache = model.decode_step(tgt[:, t : t + 1], memory, cache)
        ptr = cache.layers[0].self_k.data_ptr()
        if in_place:
            cache, memory = cache.reorder_(rows), memory.reorder_(rows)
            assert cache.layers[0].self_k.data_ptr() == ptr and cache.layers[0].self_k.size(0) == len(rows)
        else:
            cache, memory = cache.reorder(rows), memory.reorder(rows)
        assert cache.group == 2 and memory.group == 2
        tgt2 = torch.cat([tgt[rows, :4], tgt[: len(rows), 4:]], dim=1)  # (N', T) continue with new tokens
        steps = []
        for t in range(4, 8):
            logits, cache = model.decode_step(tgt2[:, t : t + 1], memory, cache)
            steps.append(logits)
        results.append(torch.cat(steps, 1))
        full = model(src[expand[rows]], tgt2[:, :8])
        torch.testing.assert_close(results[-1], full[:, 4:], atol=ATOL, rtol=0)
    torch.testing.assert_close(results[0], results[1], atol=0, rtol=0)


@torch.no_grad()
def test_reorder_within_each_sentences_beams_equals_reorder():
    """``reorder_beams_`` (beam search's reorder when no sentence leaves: rows taken from their own
    sentence's rows) continues with the logits of ``reorder``, moves no memory row, and keeps the
    buffers; where rows would cross sentences it is not for them (``reorder_`` is)."""
    model, src, tgt = model_and_data()
    expand = torch.arange(3).repeat_interleave(2)
    rows = torch.tensor([1, 1, 2, 3, 5, 4])  # each row from its own sentence's two
    results = []
    for beams_only in (False, True):
        memory, cache = model.encode(src).reorder(expand), None
        for t in range(4):
            _, cache = model.decode_step(tgt[:, t : t + 1], memory, cache)
        ptr, cross = cache.layers[0].self_k.data_ptr(), cache.layers[0].cross_k
        cache = cache.reorder_beams_(rows) if beams_only else cache.reorder(rows)
        if beams_only:
            assert cache.layers[0].self_k.data_ptr() == ptr and cache.layers[0].cross_k is cross
        tgt2 = torch.cat([tgt[rows, :4], tgt[:, 4:]], dim=1)  # (N, T)
        steps = []
        for t in range(4, 8):
            logits, cache = model.decode_step(tgt2[:, t : t + 1], memory, cache)
            steps.append(logits)
        results.append(torch.cat(steps, 1))
        torch.testing.assert_close(results[-1], model(src[expand], tgt2[:, :8])[:, 4:], atol=ATOL, rtol=0)
    torch.testing.assert_close(results[0], results[1], atol=0, rtol=0)


def test_training_forward_builds_no_decoding_cache(monkeypatch):
    """Teacher forcing (training, scoring) attends over the target's own keys and values: it makes
    no DecoderCache (no self-attention buffers to fill, no copies kept for backward), and gives the
    logits of decoding step by step through one."""
    model, src, tgt = model_and_data()
    stepwise, cache = [], None
    with torch.no_grad():
        memory = model.encode(src[:2])
        for t in range(5):
            logits, cache = model.decode_step(tgt[:2, t : t + 1], memory, cache)
            stepwise.append(logits)

    def no_cache(*args, **kwargs):
        raise AssertionError("training built a decoding cache")

    monkeypatch.setattr(model.decoder, "empty_cache", no_cache)
    model.train()
    model(src[:2], tgt[:2, :5]).sum().backward()  # (2, 5, W) with gradients, dropout on
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(src[:2], tgt[:2, :5]), torch.cat(stepwise, 1), atol=ATOL, rtol=0)
