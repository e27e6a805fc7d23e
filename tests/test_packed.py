"""Float32 CPU inference through oneDNN with packed weights (nmt.infer.packed): the same function
as the plain model, the same parameters, and what Translator.load uses on the CPU."""

from __future__ import annotations

import copy
import dataclasses
import random

import pytest
import torch
from conftest import tol
from torch import nn

from nmt.attention import MultiheadAttention
from nmt.checkpoint import save
from nmt.config import tiny
from nmt.fused_projections import fuse_projections, fused_weights, unfused
from nmt.infer.packed import PackedLinear, onednn_available, pack_linears
from nmt.infer.translate import Translator
from nmt.model import Transformer
from nmt.parameter_counts import parameter_counts
from nmt.vocab import BOS, EOS, PAD

pytestmark = [
    pytest.mark.skipif(not onednn_available(), reason="this torch build has no oneDNN packed linear ops"),
    pytest.mark.numerics,  # oneDNN's kernels: `make test` runs this file again on the AVX2-only path
]


# float32 (these models are never autocast, whatever `auto` picks), oneDNN's packed products against
# torch's on any ISA: a logit (|logit| <= ~5 for these random tiny(50) models) is reached through 2
# layers of d_model + d_ff + up to 5 attended positions of accumulation and the 50-way projection
LOGIT_ATOL = tol(torch.float32, 2 * (64 + 128 + 5) + 50, scale=5.0)


def models(tie: bool = True):
    torch.manual_seed(0)
    cfg = dataclasses.replace(tiny(50), tie_output=tie, share_embeddings=tie)
    plain = Transformer(cfg).eval()
    return plain, pack_linears(copy.deepcopy(plain))


@pytest.mark.parametrize("tie", [True, False])
def test_packed_model_computes_the_plain_model(tie):
    plain, packed = models(tie)
    attns = {name: m for name, m in packed.named_modules() if isinstance(m, MultiheadAttention)}
    fused_ids = {id(a.fused_qkv or a.fused_kv) for a in attns.values()}
    linears = [m for m in packed.modules() if isinstance(m, PackedLinear) and id(m) not in fused_ids]
    n_plain = sum(isinstance(m, nn.Linear) for m in plain.modules())
    assert not any(type(m) is nn.Linear for m in packed.modules())
    assert len(linears) == n_plain + (1 if tie else 0)  # + the tied output projection
    # self-attention gets one fused q/k/v product, cross-attention one fused k/v product
    for name, a in attns.items():
        cross = name.endswith("encoder_attn")
        assert (a.fused_kv is not None, a.fused_qkv is None) == (cross, cross), name
        fused_proj = a.fused_kv if cross else a.fused_qkv
        parts = [a.k_proj, a.v_proj] if cross else [a.q_proj, a.k_proj, a.v_proj]
        assert torch.equal(fused_proj.weight, torch.cat([m.weight.detach() for m in parts]))
    # the fused copies are not saved (the tied projection names the embedding matrix once more)
    out = {"decoder.output_projection.weight"}
    assert set(packed.state_dict()) - out == set(plain.state_dict()) - out
    if tie:  # the output projection reads the embedding matrix itself, not a copy
        assert packed.decoder.output_projection.weight is packed.decoder.embed_tokens.weight
    assert parameter_counts(packed) == parameter_counts(plain)
    fused = [
        m for m in packed.modules() if getattr(m, "fc1", None) is not None
    ]  # every FFN's ReLU in its fc1
    assert fused and all(m.fc1.relu and m.activation(torch.tensor(-1.0)) == -1.0 for m in fused)
    src = torch.tensor([[5, 9, 14, 7, EOS], [8, 6, EOS, PAD, PAD]])  # (B, S)
    tgt = torch.tensor([[BOS, 11, 12, 13], [BOS, 20, 21, PAD]])  # (B, T)
    calls = {"q_proj": 0, "fused": 0}
    hooks = [
        m.register_forward_hook(lambda *_: calls.__setitem__("q_proj", calls["q_proj"] + 1))
        for a in attns.values()
        if a.fused_qkv is not None
        for m in [a.q_proj]
    ]
    hooks += [
        m.register_forward_hook(lambda *_: calls.__setitem__("fused", calls["fused"] + 1))
        for a in attns.values()
        for m in [a.fused_qkv or a.fused_kv]
    ]
    with torch.inference_mode():
        torch.testing.assert_close(packed(src, tgt), plain(src, tgt), atol=LOGIT_ATOL, rtol=0)
    assert calls == {"q_proj": 0, "fused": len(attns)}  # inference uses the fused products only
    for h in hooks:
        h.remove()
    with torch.inference_mode():
        # incremental decoding with the cache: the same logits step by step
        mem_p, mem_q, cache_p, cache_q = plain.encode(src), packed.encode(src), None, None
        for t in range(tgt.size(1)):
            out_p, cache_p = plain.decode_step(tgt[:, t : t + 1], mem_p, cache_p)
            out_q, cache_q = packed.decode_step(tgt[:, t : t + 1], mem_q, cache_q)
            torch.testing.assert_close(out_q, out_p, atol=LOGIT_ATOL, rtol=0)
    # outside inference (autograd on) a PackedLinear is F.linear on the same parameters: equal bits
    assert torch.equal(packed(src, tgt), plain(src, tgt))


class CountingFusion(nn.Module):
    """A fused projection for the test: one nn.Linear over the fused weights, counting its calls,
    used where ``use`` says."""

    def __init__(self, layers, use: bool):
        super().__init__()
        weight, bias = fused_weights(layers)  # (sum out, D), (sum out,)
        self.linear = nn.Linear(weight.size(1), weight.size(0))
        with torch.no_grad():
            self.linear.weight.copy_(weight)
            self.linear.bias.copy_(bias)
        self.use, self.calls = use, 0

    def applies(self, x: torch.Tensor) -> bool:
        return self.use

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.linear(x)


@pytest.mark.parametrize("use", [True, False])
def test_fuse_projections_is_the_one_hook_and_applies_switches_it(use):
    """nmt.fused_projections.fuse_projections(model, make) gives every self-attention one product
    over [W^Q; W^K; W^V] and every encoder_attn one over [W^K; W^V]; attention computes with it
    exactly where its ``applies(x)`` says (the same logits), else with the separate projections
    (the plain model's bits); ``make`` returning None leaves a model unfused."""
    plain, _ = models()
    fused = fuse_projections(copy.deepcopy(plain), lambda layers: CountingFusion(layers, use))
    attns = {name: m for name, m in fused.named_modules() if isinstance(m, MultiheadAttention)}
    for name, a in attns.items():
        cross = name.endswith("encoder_attn")
        slot, other = (a.fused_kv, a.fused_qkv) if cross else (a.fused_qkv, a.fused_kv)
        parts = [a.k_proj, a.v_proj] if cross else [a.q_proj, a.k_proj, a.v_proj]
        assert other is None and torch.equal(slot.linear.weight, torch.cat([m.weight for m in parts]))
    src = torch.tensor([[5, 9, 14, 7, EOS], [8, 6, EOS, PAD, PAD]])  # (B, S)
    tgt = torch.tensor([[BOS, 11, 12, 13], [BOS, 20, 21, PAD]])  # (B, T)
    with torch.no_grad():
        got, want = fused(src, tgt), plain(src, tgt)
    if use:
        torch.testing.assert_close(got, want, atol=LOGIT_ATOL, rtol=0)
    else:
        assert torch.equal(got, want)
    assert [(a.fused_qkv or a.fused_kv).calls for a in attns.values()] == [int(use)] * len(attns)
    untouched = fuse_projections(copy.deepcopy(plain), lambda layers: None)
    assert all(
        m.fused_qkv is None and m.fused_kv is None
        for m in untouched.modules()
        if isinstance(m, MultiheadAttention)
    )


def test_unfused_switches_the_fused_projections_off_for_a_block_and_restores_them():
    """nmt.fused_projections.unfused(model): inside the block every attention computes with its
    separate projections (no fused module is called: the plain model's bits); on exit, also when the
    block raises, each attention has its own fused modules back."""
    plain, _ = models()
    fused = fuse_projections(copy.deepcopy(plain), lambda layers: CountingFusion(layers, True))
    attns = [m for m in fused.modules() if isinstance(m, MultiheadAttention)]
    before = [(a.fused_qkv, a.fused_kv) for a in attns]
    src = torch.tensor([[5, 9, 14, 7, EOS], [8, 6, EOS, PAD, PAD]])  # (B, S)
    tgt = torch.tensor([[BOS, 11, 12, 13], [BOS, 20, 21, PAD]])  # (B, T)
    with torch.no_grad(), unfused(fused) as same:
        assert same is fused and all(a.fused_qkv is None and a.fused_kv is None for a in attns)
        assert torch.equal(fused(src, tgt), plain(src, tgt))
    after = [(a.fused_qkv, a.fused_kv) for a in attns]
    assert all(x is y and u is v for (x, u), (y, v) in zip(after, before))
    assert [(qkv or kv).calls for qkv, kv in after] == [0] * len(attns)
    with pytest.raises(RuntimeError, match="inside"), unfused(fused):
        raise RuntimeError("inside")
    assert all(a.fused_qkv is x and a.fused_kv is u for a, (x, u) in zip(attns, before))


def test_packed_linear_is_batch_invariant():
    """A row's output does not depend on the rows batched with it (beam search relies on it)."""
    torch.manual_seed(0)
    layer = PackedLinear(nn.Parameter(torch.randn(96, 64)), nn.Parameter(torch.randn(96)))
    x = torch.randn(40, 64)
    with torch.inference_mode():
        assert torch.equal(layer(x)[:3], layer(x[:3]))
        want = x @ layer.weight.T + layer.bias  # 64 products of randn x randn per output, fp32
        torch.testing.assert_close(
            layer(x), want, atol=tol(torch.float32, 64, scale=want.abs().max().item()), rtol=0
        )


def test_translator_load_packs_fp32_cpu_models_and_translates_the_same(tmp_path, monkeypatch):
    import sentencepiece as spm

    import nmt.allocator

    kept = []  # CPU inference keeps freed memory (a step's logits exceed glibc's mmap threshold)
    monkeypatch.setattr(nmt.allocator, "keep_freed_memory", lambda: kept.append(True) or True)

    rng = random.Random(0)
    words = ["haus", "katze", "hund", "baum", "rot", "blau", "gross", "klein", "der", "die"]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 9))) + "." for _ in range(200)]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(tmp_path / "spm"),
        vocab_size=50,
        model_type="bpe",
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        character_coverage=1.0,
        minloglevel=2,
    )
    plain, _ = models()
    checkpoint = save(
        tmp_path / "checkpoint",
        model=plain,
        spm_model=tmp_path / "spm.model",
        config={"model": dataclasses.asdict(plain.cfg), "train": {}, "data": {}},
    )
    translator = Translator.load(checkpoint, device="cpu", precision="fp32")
    assert kept == [True]
    assert any(isinstance(m, PackedLinear) for m in translator.model.modules())
    reference = Translator(plain, translator.sp, device="cpu")  # built by hand: not packed
    assert not any(isinstance(m, PackedLinear) for m in reference.model.modules())
    got = translator.translate_nbest(lines[:12], beam=3, nbest=3, max_len_a=0, max_len_b=8)
    want = reference.translate_nbest(lines[:12], beam=3, nbest=3, max_len_a=0, max_len_b=8)
    assert [[t.text for t in r] for r in got] == [[t.text for t in r] for r in want]
    for r, s in zip(got, want):
        assert [t.score for t in r] == pytest.approx([t.score for t in s], abs=1e-4)
