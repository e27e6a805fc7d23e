"""Numerics of the model (issue: the paper's Transformer)."""

import math

import pytest
import torch
from conftest import tol

from nmt.config import ConfigError, ModelConfig, apply_overrides, base, big, tiny
from nmt.infer.options import SearchOptions
from nmt.model import Transformer, sinusoidal_table
from nmt.parameter_counts import parameter_counts

# kernel- and precision-sensitive: `make test` runs this file again on the AVX2-only path (conftest)
pytestmark = pytest.mark.numerics


def hand_count(*, V, d, d_ff, h, d_k, d_v, N, N_dec=None):
    """Parameters of the paper's architecture, from the architecture, with one shared V x d matrix
    (N encoder layers and N, or N_dec, decoder layers)."""
    attn = d * h * d_k + h * d_k + d * h * d_k + h * d_k + d * h * d_v + h * d_v + h * d_v * d + d
    ffn = d * d_ff + d_ff + d_ff * d + d
    ln = 2 * d
    enc_layer = attn + ffn + 2 * ln
    dec_layer = 2 * attn + ffn + 3 * ln
    return V * d + N * enc_layer + (N if N_dec is None else N_dec) * dec_layer


def test_parameter_counts_base_and_big():
    for name, cfg, paper in (("base", base(37000), 65e6), ("big", big(37000), 213e6)):
        with torch.device("meta"):
            model = Transformer(cfg)
        expected = hand_count(
            V=37000, d=cfg.d_model, d_ff=cfg.d_ff, h=cfg.n_heads, d_k=cfg.d_k, d_v=cfg.d_v, N=cfg.n_layers
        )
        counts = parameter_counts(model)
        print(f"{name}: {counts['total']:,} parameters (paper: {paper / 1e6:.0f}M)")
        assert counts["total"] == expected
        assert sum(p.numel() for p in model.parameters()) == expected  # shared matrix counted once
    assert expected == 214_245_376


def test_base_count_value():
    with torch.device("meta"):
        model = Transformer(base(37000))
    assert parameter_counts(model)["total"] == 63_082_496


@pytest.mark.parametrize("pos,i", [(0, 0), (1, 0), (5, 3), (17, 10), (99, 31)])
def test_sinusoidal_matches_formula(pos, i):
    d = 64
    table = sinusoidal_table(128, d)
    assert table[pos, 2 * i].item() == pytest.approx(math.sin(pos / 10000 ** (2 * i / d)), abs=1e-6)
    assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(pos / 10000 ** (2 * i / d)), abs=1e-6)


def test_embedding_scale_and_positions():
    cfg = tiny(50)
    cfg.dropout = 0.0
    model = Transformer(cfg).eval()
    tokens = torch.tensor([[5, 7, 9]])
    x = model.encoder.embed(tokens)
    expected = model.encoder.embed_tokens.weight[tokens] * math.sqrt(cfg.d_model) + sinusoidal_table(
        3, cfg.d_model
    )
    torch.testing.assert_close(x, expected)


def test_three_tied_matrices_are_one_tensor():
    model = Transformer(tiny(50))
    w = model.encoder.embed_tokens.weight
    assert model.decoder.embed_tokens.weight is w
    assert model.decoder.output_projection is None
    # the logits use that same matrix: changing it changes them as x @ W^T
    model.eval()
    src, tgt = torch.tensor([[4, 5, 3]]), torch.tensor([[2, 6]])
    memory = model.encode(src)
    logits, _ = model.decode_step(tgt, memory)
    with torch.no_grad():
        w[7].add_(torch.randn(w.size(1)))  # (a constant shift is invisible after LayerNorm)
    logits2, _ = model.decode_step(tgt, memory)
    assert not torch.allclose(logits[..., 7], logits2[..., 7])


def test_untied_vocabularies():
    cfg = tiny(50)
    cfg.share_embeddings, cfg.tie_output, cfg.tgt_vocab_size = False, False, 60
    model = Transformer(cfg)
    assert model.encoder.embed_tokens.weight is not model.decoder.embed_tokens.weight
    logits = model(torch.tensor([[4, 5, 3]]), torch.tensor([[2, 6, 59]]))
    assert logits.shape == (1, 3, 60)


# The tiny(40) models below run in float32 (never autocast, whatever `auto` picks) on any kernel ISA.
# Two ways to one logit (a batch against one sentence, cached steps against the full forward) sum the
# same products in other orders and blockings: |logit| <= ~5, reached through up to 3 layers of
# d_model + d_ff + up to 20 attended positions of accumulation and the 40-way output projection.
LOGIT_ATOL = tol(torch.float32, 3 * (64 + 128 + 20) + 40, scale=5.0)


def eval_model(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = tiny(40)
    for k, v in kw.items():
        setattr(cfg, k, v)
    return Transformer(cfg.validate()).eval()


@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_causality(norm_position):
    model = eval_model(norm_position=norm_position)
    src = torch.randint(4, 40, (2, 7))
    tgt = torch.randint(4, 40, (2, 9))
    base_logits = model(src, tgt)
    for t in range(8):
        changed = tgt.clone()
        changed[:, t + 1] = (changed[:, t + 1] + 1 - 4) % 36 + 4
        logits = model(src, changed)
        torch.testing.assert_close(logits[:, : t + 1], base_logits[:, : t + 1], atol=1e-6, rtol=0)
        assert not torch.allclose(logits[:, t + 1 :], base_logits[:, t + 1 :])


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_padding_invariance(positional):
    model = eval_model(positional=positional)
    src = torch.tensor([[5, 6, 7, 3]])
    tgt = torch.tensor([[2, 8, 9]])
    memory_alone = model.encode(src).out
    logits_alone = model(src, tgt)
    pad = 0
    src_batch = torch.tensor([[5, 6, 7, 3, pad, pad, pad], [9, 9, 8, 7, 6, 5, 3], [4, 4, 4, 4, 4, 3, pad]])
    tgt_batch = torch.tensor([[2, 8, 9, pad, pad, pad], [2, 5, 6, 7, 8, 9], [2, 4, 4, 4, pad, pad]])
    memory_batch = model.encode(src_batch).out
    logits_batch = model(src_batch, tgt_batch)
    torch.testing.assert_close(memory_batch[0, :4], memory_alone[0], atol=LOGIT_ATOL, rtol=0)
    torch.testing.assert_close(logits_batch[0, :3], logits_alone[0], atol=LOGIT_ATOL, rtol=0)


@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_incremental_decoding_equals_forward(norm_position):
    model = eval_model(norm_position=norm_position)
    src = torch.tensor([[5, 6, 7, 3, 0], [9, 9, 8, 7, 3]])
    tgt = torch.randint(4, 40, (2, 8))
    full = model(src, tgt)
    memory = model.encode(src)
    cache, steps = None, []
    for t in range(tgt.size(1)):
        logits, cache = model.decode_step(tgt[:, t : t + 1], memory, cache)
        steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=LOGIT_ATOL, rtol=0)
    # a multi-token chunk after a cached prefix uses the offset causal mask
    cache = None
    l1, cache = model.decode_step(tgt[:, :3], memory, cache)
    l2, cache = model.decode_step(tgt[:, 3:], memory, cache)
    torch.testing.assert_close(torch.cat([l1, l2], 1), full, atol=LOGIT_ATOL, rtol=0)


@pytest.mark.parametrize("enc,dec", [(3, 1), (1, 3)])
def test_separate_encoder_and_decoder_depths(enc, dec):
    """model.n_encoder_layers / n_decoder_layers (a deep encoder, shallow decoder): the stacks have
    those depths, the parameters those of the formula, and incremental decoding equals a forward."""
    cfg = apply_overrides(
        tiny(40), {"n_encoder_layers": str(enc), "n_decoder_layers": str(dec)}, section="model"
    )
    assert (cfg.encoder_layers, cfg.decoder_layers, cfg.depth()) == (enc, dec, f"N={enc}/{dec}")
    assert tiny(40).depth() == f"N={tiny(40).n_layers}"  # unset: both stacks have N layers
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    assert (len(model.encoder.layers), len(model.decoder.layers)) == (enc, dec)
    assert sum(p.numel() for p in model.parameters()) == hand_count(
        V=40, d=cfg.d_model, d_ff=cfg.d_ff, h=cfg.n_heads, d_k=cfg.d_k, d_v=cfg.d_v, N=enc, N_dec=dec
    )
    src = torch.tensor([[5, 6, 7, 3, 0], [9, 9, 8, 7, 3]])
    tgt = torch.randint(4, 40, (2, 7))
    full = model(src, tgt)
    memory, cache, steps = model.encode(src), None, []
    for t in range(tgt.size(1)):
        logits, cache = model.decode_step(tgt[:, t : t + 1], memory, cache)
        steps.append(logits)
    assert len(cache.layers) == dec
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=LOGIT_ATOL, rtol=0)
    for field in ("n_encoder_layers", "n_decoder_layers"):
        with pytest.raises(ConfigError, match=field):
            apply_overrides(tiny(40), {field: "0"}, section="model")
        assert getattr(apply_overrides(cfg, {field: "none"}, section="model"), field) is None


def test_incremental_decoding_after_reorder():
    model = eval_model()
    src = torch.tensor([[5, 6, 7, 3, 0], [9, 9, 8, 7, 3]])
    tgt = torch.randint(4, 40, (2, 6))
    memory = model.encode(src)
    cache = None
    for t in range(3):
        _, cache = model.decode_step(tgt[:, t : t + 1], memory, cache)
    order = torch.tensor([1, 0, 1])  # swap and duplicate rows, as beam search does
    memory2, cache = memory.reorder(order), cache.reorder(order)
    tgt2 = tgt[order]
    steps = []
    for t in range(3, 6):
        logits, cache = model.decode_step(tgt2[:, t : t + 1], memory2, cache)
        steps.append(logits)
    full = model(src[order], tgt2)
    torch.testing.assert_close(torch.cat(steps, 1), full[:, 3:], atol=LOGIT_ATOL, rtol=0)


def record(modules: dict) -> dict:
    """Forward hooks: name -> (first input, output) of each module's last call."""
    seen = {}
    for name, module in modules.items():
        module.register_forward_hook(lambda m, i, o, name=name: seen.__setitem__(name, (i[0], o)))
    return seen


def test_post_norm_order_by_hooks():
    """Each encoder sublayer output is LayerNorm(x + sublayer(x)), observed with forward hooks."""
    model = eval_model(norm_position="post")
    layer = model.encoder.layers[0]
    seen = record(
        {
            "q": layer.self_attn.q_proj,
            "attn": layer.self_attn.out_proj,
            "ln1": layer.self_attn_layer_norm,
            "fc1": layer.fc1,
            "ffn": layer.fc2,
            "ln2": layer.final_layer_norm,
            "embed": model.encoder.embed,
        }
    )
    memory = model.encode(torch.tensor([[5, 6, 7, 3]]))
    x = seen["embed"][1]
    torch.testing.assert_close(seen["q"][0], x)  # the sublayer sees the un-normalised x
    torch.testing.assert_close(seen["ln1"][0], x + seen["attn"][1])  # LayerNorm(x + attn(x))
    torch.testing.assert_close(seen["fc1"][0], seen["ln1"][1])
    torch.testing.assert_close(seen["ln2"][0], seen["ln1"][1] + seen["ffn"][1])  # LayerNorm(x + ffn(x))
    torch.testing.assert_close(
        model.encoder.layers[1](seen["ln2"][1], torch.ones(1, 1, 1, 4, dtype=torch.bool)), memory.out
    )  # the last LayerNorm output is the layer output


def test_decoder_post_norm_order_by_hooks():
    model = eval_model(norm_position="post")
    layer = model.decoder.layers[1]
    seen = record(
        {
            "in": layer.self_attn.q_proj,
            "self": layer.self_attn.out_proj,
            "ln1": layer.self_attn_layer_norm,
            "cross_q": layer.encoder_attn.q_proj,
            "cross": layer.encoder_attn.out_proj,
            "ln2": layer.encoder_attn_layer_norm,
            "ffn": layer.fc2,
            "ln3": layer.final_layer_norm,
        }
    )
    model(torch.tensor([[5, 6, 3]]), torch.tensor([[2, 7, 8]]))
    torch.testing.assert_close(seen["ln1"][0], seen["in"][0] + seen["self"][1])
    torch.testing.assert_close(seen["cross_q"][0], seen["ln1"][1])
    torch.testing.assert_close(seen["ln2"][0], seen["ln1"][1] + seen["cross"][1])
    torch.testing.assert_close(seen["ln3"][0], seen["ln2"][1] + seen["ffn"][1])


def test_pre_norm_order_by_hooks():
    model = eval_model(norm_position="pre")
    layer = model.encoder.layers[0]
    seen = record(
        {
            "q": layer.self_attn.q_proj,
            "attn": layer.self_attn.out_proj,
            "ln1": layer.self_attn_layer_norm,
            "embed": model.encoder.embed,
        }
    )
    model.encode(torch.tensor([[5, 6, 7, 3]]))
    torch.testing.assert_close(seen["ln1"][0], seen["embed"][1])  # LayerNorm first
    torch.testing.assert_close(seen["q"][0], seen["ln1"][1])


def test_sdpa_matches_explicit_attention():
    torch.manual_seed(0)
    model = eval_model(d_k=8, d_v=24)  # d_k and d_v independent of d_model / h
    attn = model.encoder.layers[0].self_attn
    x = torch.randn(2, 5, 64)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]
    out = attn(x, x, mask=mask)
    q = attn.q_proj(x).view(2, 5, 4, 8).transpose(1, 2)
    k = attn.k_proj(x).view(2, 5, 4, 8).transpose(1, 2)
    v = attn.v_proj(x).view(2, 5, 4, 24).transpose(1, 2)
    scores = q @ k.transpose(-1, -2) / math.sqrt(8)
    scores = scores.masked_fill(~mask, float("-inf"))
    ref = (scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 5, 96)
    torch.testing.assert_close(out, attn.out_proj(ref), atol=1e-5, rtol=0)


def test_initialisation():
    torch.manual_seed(0)
    cfg = ModelConfig(
        src_vocab_size=2000, tgt_vocab_size=2000, n_layers=1, d_model=256, d_ff=512, n_heads=4, d_k=64, d_v=64
    )
    model = Transformer(cfg)
    w = model.encoder.embed_tokens.weight
    assert w[0].abs().sum() == 0  # padding row
    assert w[1:].std().item() == pytest.approx(256**-0.5, rel=0.05)
    fc1 = model.encoder.layers[0].fc1.weight
    bound = math.sqrt(6 / (256 + 512))
    assert fc1.abs().max() <= bound and fc1.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.05)
    assert model.encoder.layers[0].fc1.bias.abs().sum() == 0


def test_checkpoint_written_before_model_refactor_loads_and_matches():
    """A checkpoint saved by the model code before Embedding/PositionalEncoding/FeedForwardSublayer
    (learned positions, separate tables, untied output) loads with the same parameter names and
    gives the logits it gave then."""
    import json
    from pathlib import Path

    from nmt.checkpoint import load_model

    here = Path(__file__).parent / "fixtures"
    model, _ = load_model(here / "pre_refactor_ckpt")
    ref = json.loads((here / "pre_refactor_ckpt_logits.json").read_text())
    with torch.no_grad():
        logits = model(torch.tensor(ref["src"]), torch.tensor(ref["tgt_in"]))
    assert torch.allclose(logits, torch.tensor(ref["logits"]), atol=1e-5)


@pytest.mark.parametrize("name", ["paper", "prenorm_gelu_window"])
def test_checkpoint_written_before_the_model_split_translates_identically(name):
    """Checkpoints saved at d9700a9, before model.py's cache, explicit attention and fused
    projections moved to modules of their own (tests/fixtures/split_model_ckpts: the paper's
    shared/tied sinusoidal post-norm model; a pre-norm GELU model with a restricted window and its
    own target table), load with the same parameter names and give what that code gave: the
    teacher-forced logits, the logits step by step through the cache, the beam-4 n-best (tokens
    and scores) and the greedy outputs."""
    import json
    from pathlib import Path

    from nmt.checkpoint import load_model
    from nmt.infer.search import beam_search, greedy_search

    here = Path(__file__).parent / "fixtures" / "split_model_ckpts"
    ref = json.loads((here / "reference.json").read_text())
    model, _ = load_model(here / name)
    src, tgt_in, want = torch.tensor(ref["src"]), torch.tensor(ref["tgt_in"]), ref[name]
    with torch.no_grad():
        logits = model(src, tgt_in)
        memory, cache, steps = model.encode(src), None, []
        for t in range(tgt_in.size(1)):
            step, cache = model.decode_step(tgt_in[:, t : t + 1], memory, cache)
            steps.append(step)
        beams = beam_search(model, src, SearchOptions(beam=4, nbest=4, max_len_a=0, max_len_b=12))
        greedy = greedy_search(model, src, SearchOptions(max_len_a=0, max_len_b=12))
    # float32 on any CPU path (these models are not autocast): a logit is reached through ~2 x 2
    # layers of (d_model + d_ff + positions) accumulations and the output projection
    cfg = model.cfg
    n_accum = 2 * cfg.n_layers * (cfg.d_model + cfg.d_ff + cfg.max_positions) + cfg.tgt_vocab_size
    scale = max(1.0, torch.tensor(want["logits"]).abs().max().item())
    logit_tol = tol(torch.float32, n_accum, scale=scale)
    torch.testing.assert_close(logits, torch.tensor(want["logits"]), atol=logit_tol, rtol=0)
    torch.testing.assert_close(torch.cat(steps, 1), torch.tensor(want["steps"]), atol=logit_tol, rtol=0)
    assert [[h.tokens for h in hs] for hs in beams] == [[tokens for tokens, _ in hs] for hs in want["beam4"]]
    # a score sums |Y| <= 12 log-probs, each a logit minus a logsumexp of logits (2 x logit_tol),
    # divided by a length penalty >= 1
    score_tol = 12 * 2 * logit_tol
    assert [[h.score for h in hs] for hs in beams] == [
        [pytest.approx(s, abs=score_tol) for _, s in hs] for hs in want["beam4"]
    ]
    assert [[h.tokens, pytest.approx(h.score, abs=score_tol)] for h in greedy] == want["greedy"]


def test_select_projects_only_the_chosen_positions():
    """Training projects only real target tokens (select=): the same logits as the full forward."""
    torch.manual_seed(0)
    model = Transformer(tiny(40)).eval()
    src, tgt = torch.randint(4, 40, (3, 6)), torch.randint(4, 40, (3, 5))
    select = torch.rand(3, 5) > 0.4
    full = model(src, tgt)  # (B, T, W)
    part = model(src, tgt, select)  # (K, W)
    assert part.shape == (int(select.sum()), 40)
    torch.testing.assert_close(part, full[select])


# ------------------------------------------------------------------ training-path attention and dropout
@pytest.mark.parametrize("kind", ["padding", "causal", "band", "cross"])
def test_explicit_attention_equals_sdpa_with_gradients(kind):
    """nmt.explicit_attention.explicit_attention (training on CPU) is F.scaled_dot_product_attention: same
    outputs and same gradients for padding masks, the causal mask, a band (T, N) mask and
    cross-attention (T != N)."""
    import torch.nn.functional as F

    from nmt.attention import window_mask
    from nmt.explicit_attention import explicit_attention

    torch.manual_seed(0)
    b, h, t, n, d = 3, 2, 6, (9 if kind == "cross" else 6), 8
    inputs = [torch.randn(b, h, length, d, dtype=torch.float64, requires_grad=True) for length in (t, n, n)]
    mask, causal = None, kind == "causal"
    if kind in ("padding", "cross"):
        mask = torch.ones(b, 1, 1, n, dtype=torch.bool)
        mask[1, ..., n - 2 :] = False
    elif kind == "band":
        mask = window_mask(t, n, start=0, window=2, causal=False, device="cpu")
    grad = torch.randn(b, h, t, d, dtype=torch.float64)
    results = []
    for attention in (
        lambda q, k, v: explicit_attention(q, k, v, mask=mask, is_causal=causal, dropout_p=0.0),
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal),
    ):
        out = attention(*inputs)
        out.backward(grad)
        results.append((out.detach().clone(), [x.grad.clone() for x in inputs]))
        for x in inputs:
            x.grad = None
    (out_a, grads_a), (out_b, grads_b) = results
    torch.testing.assert_close(out_a.double(), out_b, atol=1e-6, rtol=1e-6)  # explicit works in float32
    for ga, gb in zip(grads_a, grads_b):
        torch.testing.assert_close(ga, gb, atol=1e-5, rtol=1e-5)


def test_bf16_training_step_takes_the_explicit_path_and_matches_sdpa(monkeypatch):
    """A training-mode forward/backward in bf16 autocast (dropout 0) through the explicit
    attention is as close to float32's loss and gradients as through SDPA's bf16 kernel
    (EXPLICIT_ATTENTION_MAX = 0 forces SDPA); float32 and inference (no gradients) keep SDPA."""
    import nmt.attention
    import nmt.explicit_attention as explicit

    calls = []
    real = explicit.explicit_attention
    monkeypatch.setattr(nmt.attention, "explicit_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]])
    tgt = torch.tensor([[2, 11, 12, 13], [2, 14, 0, 0]])

    def loss_and_grads(dtype=torch.bfloat16):
        model = eval_model(dropout=0.0).train()
        with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
            logits = model(src, tgt)
        loss = logits.float().log_softmax(-1)[..., 7].sum()
        loss.backward()
        return loss.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}

    loss_a, grads_a = loss_and_grads()
    assert len(calls) == 2 * 3  # tiny: 2 encoder self, 2 decoder self + 2 cross attentions
    monkeypatch.setattr(explicit, "EXPLICIT_ATTENTION_MAX", 0)
    loss_b, grads_b = loss_and_grads()
    assert len(calls) == 6
    monkeypatch.setattr(explicit, "EXPLICIT_ATTENTION_MAX", 10**6)
    loss_fp32, grads_fp32 = loss_and_grads(dtype=None)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        eval_model().encode(src)
    assert len(calls) == 6  # float32 and inference: SDPA
    assert abs(loss_a - loss_fp32) <= max(2 * abs(loss_b - loss_fp32), 1e-3 * abs(loss_fp32))
    for k, reference in grads_fp32.items():  # bf16 rounding: a few % on the smallest gradients
        error_a = ((grads_a[k] - reference).norm() / reference.norm()).item()
        error_b = ((grads_b[k] - reference).norm() / reference.norm()).item()
        assert error_a <= max(2.5 * error_b, 0.02), (k, error_a, error_b)


def test_dropout_keeps_each_element_with_probability_1_minus_p():
    from nmt.dropout import Dropout

    torch.manual_seed(0)
    drop = Dropout(0.1)
    x = torch.ones(1000, 1000, requires_grad=True)
    out = drop(x)
    kept = out.ne(0)
    assert abs(kept.float().mean().item() - 0.9) < 0.002  # 1e6 draws: sd 0.0003
    torch.testing.assert_close(out[kept], torch.full((int(kept.sum()),), 1 / 0.9))
    out.backward(torch.full_like(out, 2.0))
    torch.testing.assert_close(x.grad, kept.float() * 2 / 0.9)  # d out / d x = mask / (1 - p)
    bf16 = drop(torch.ones(100, 100, dtype=torch.bfloat16))
    assert bf16.dtype == torch.bfloat16 and set(bf16.unique().tolist()) <= {
        0.0,
        (torch.tensor(1 / 0.9).bfloat16().item()),
    }
    drop.eval()
    assert drop(x) is x
    assert Dropout(0.0).train()(x) is x
    with pytest.raises(ValueError, match="dropout probability"):
        Dropout(1.0)


@pytest.mark.parametrize("p", [0.1, 0.3, 0.9])
def test_keep_mask_keeps_with_probability_1_minus_p_in_any_shape(p):
    """16 random bits per element, four elements to each int64 draw: the keep rate is 1 - p (to
    1/65536), each of a draw's four lanes keeps at that rate and neighbours are uncorrelated, odd
    sizes work, and the generator decides it (the same seed, the same mask)."""
    from nmt.dropout import keep_mask

    torch.manual_seed(1)
    mask = keep_mask(torch.Size([999, 1001]), p, torch.device("cpu"))  # 999,999 elements: not a multiple of 4
    assert mask.shape == (999, 1001) and mask.dtype == torch.bool
    rate = mask.float().mean().item()
    assert abs(rate - (1 - p)) < 0.003  # 1e6 draws: sd <= 0.0005
    flat = mask.flatten().float()
    both = (flat[:-1] * flat[1:]).mean().item()  # P(neighbours both kept) = (1 - p)^2 if independent
    assert abs(both - (1 - p) ** 2) < 0.003
    lanes = flat[:999_996].view(-1, 4).mean(0)  # each of the four 16-bit lanes of an int64 draw
    assert (lanes - (1 - p)).abs().max() < 0.006
    torch.manual_seed(1)
    assert torch.equal(keep_mask(torch.Size([999, 1001]), p, torch.device("cpu")), mask)
    assert keep_mask(torch.Size([0, 5]), p, torch.device("cpu")).shape == (0, 5)


@pytest.mark.parametrize("p, rate", [(0.99999, 1 / 65536), (1 - 2**-18, 2**-18), (1e-6, 1 - 1e-6)])
def test_keep_mask_near_0_and_1(p, rate):
    """p = 0.99999 rounds to 65535/65536 (one pattern of 16 bits kept); beyond 1 - 2^-17 or under
    2^-17 16 bits cannot hold p, and the mask comes from float32 uniforms (not all kept)."""
    from nmt.dropout import keep_mask

    torch.manual_seed(0)
    mask = keep_mask(torch.Size([4_000_000]), p, torch.device("cpu"))
    kept = int(mask.sum())
    assert abs(kept - rate * 4e6) <= 5 * (rate * (1 - rate) * 4e6) ** 0.5 + 1, kept


def test_attention_dropout_on_the_explicit_path_keeps_the_expected_weights():
    """With values all 1, each output is sum_j w_j m_j / (1 - p): 1 on average."""
    from nmt.explicit_attention import explicit_attention

    torch.manual_seed(0)
    q, k = torch.randn(50, 4, 20, 8), torch.randn(50, 4, 20, 8)
    out = explicit_attention(q, k, torch.ones(50, 4, 20, 8), mask=None, is_causal=True, dropout_p=0.3)
    assert abs(out.mean().item() - 1.0) < 0.02 and out.std().item() > 0.1


def kept_where_dropped(observed: torch.Tensor, full: torch.Tensor, p: float) -> torch.Tensor:
    """observed should be dropout(full): each element 0 or full / (1 - p). Returns the kept mask,
    after checking the kept elements and that about 1 - p of them are kept."""
    kept = observed.ne(0)
    torch.testing.assert_close(observed[kept], full[kept] / (1 - p))
    assert abs(kept.float().mean().item() - (1 - p)) < 0.1, kept.float().mean().item()
    return kept


def test_training_drops_the_embedding_sums_and_each_sublayer_output():
    """Section 5.4, post-norm: in training, dropout (P_drop = 0.5 here; attention and activation
    dropout 0) on the sums of embeddings and positions, encoder and decoder, and on the output of
    each sublayer before it is added to the sublayer input: LayerNorm(x + Dropout(Sublayer(x))).
    Each place draws its own mask. In eval mode the same model drops nothing."""
    p = 0.5
    model = eval_model(dropout=p)
    enc, dec = model.encoder.layers[0], model.decoder.layers[0]
    seen = record(
        {
            "e_in": enc.self_attn.q_proj,
            "e_attn": enc.self_attn.out_proj,
            "e_ln1": enc.self_attn_layer_norm,
            "e_ffn": enc.fc2,
            "e_ln2": enc.final_layer_norm,
            "d_in": dec.self_attn.q_proj,
            "d_self": dec.self_attn.out_proj,
            "d_ln1": dec.self_attn_layer_norm,
            "d_cross": dec.encoder_attn.out_proj,
            "d_ln2": dec.encoder_attn_layer_norm,
            "d_ffn": dec.fc2,
            "d_ln3": dec.final_layer_norm,
        }
    )
    src = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 3], [12, 13, 14, 15, 16, 17, 18, 3]])  # (B, S)
    tgt = torch.tensor([[2, 20, 21, 22, 23, 24, 25, 26], [2, 27, 28, 29, 30, 31, 32, 33]])  # (B, T)
    table = model.encoder.embed_tokens.weight

    def embedded(tokens):  # (B, T) -> (B, T, D): embedding * sqrt(d_model) + PE, by the formula
        d = model.cfg.d_model
        return table[tokens] * math.sqrt(d) + sinusoidal_table(tokens.size(1), d)

    for training in (True, False):
        model.train(training)
        torch.manual_seed(1)
        with torch.no_grad():
            model(src, tgt)
        sums = {  # name: (what the residual sum received, the sublayer output)
            "enc embedding": (seen["e_in"][0], embedded(src)),
            "enc self-attention": (seen["e_ln1"][0] - seen["e_in"][0], seen["e_attn"][1]),
            "enc feed-forward": (seen["e_ln2"][0] - seen["e_ln1"][1], seen["e_ffn"][1]),
            "dec embedding": (seen["d_in"][0], embedded(tgt)),
            "dec self-attention": (seen["d_ln1"][0] - seen["d_in"][0], seen["d_self"][1]),
            "dec cross-attention": (seen["d_ln2"][0] - seen["d_ln1"][1], seen["d_cross"][1]),
            "dec feed-forward": (seen["d_ln3"][0] - seen["d_ln2"][1], seen["d_ffn"][1]),
        }
        if not training:
            for name, (observed, full) in sums.items():
                torch.testing.assert_close(observed, full, msg=lambda m, name=name: f"{name}: {m}")
            continue
        masks = {name: kept_where_dropped(observed, full, p) for name, (observed, full) in sums.items()}
        flat = [m.flatten() for m in masks.values()]
        assert all(not torch.equal(a, b) for i, a in enumerate(flat) for b in flat[i + 1 :])  # own masks


def test_decoder_layer_takes_its_options_by_keyword():
    """DecoderLayer.forward(x, memory_kv, *, ...): everything after the input and the memory's keys
    and values is keyword-only."""
    import inspect

    from nmt.model import DecoderLayer

    params = list(inspect.signature(DecoderLayer.forward).parameters.values())[1:]  # without self
    assert [p.kind for p in params[:2]] == [inspect.Parameter.POSITIONAL_OR_KEYWORD] * 2
    assert params[2:] and all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[2:])
