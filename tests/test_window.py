"""Restricted self-attention (section 4 and Table 1 of the paper)."""

import pytest
import torch

from nmt.config import tiny
from nmt.model import Transformer


def make(window, *, n_layers=2, seed=0):
    torch.manual_seed(seed)
    cfg = tiny(50)
    cfg.dropout, cfg.n_layers, cfg.attention_window = 0.0, n_layers, window
    return Transformer(cfg).eval()


def batch(seed=1, b=3, s=11, t=9, pad_tail=True):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 50, (b, s), generator=g)
    tgt = torch.randint(4, 50, (b, t), generator=g)
    if pad_tail:
        src[0, 7:] = 0  # padding (pad_id 0) at the end of the first sentence
    return src, tgt


def test_window_at_least_length_equals_full_attention():
    src, tgt = batch()
    full = make(None)
    for r in (10, 11, 40):  # S = 11, T = 9: any r >= length - 1 sees everything
        wide = make(r)  # same seed: the same weights (the window adds no parameters)
        with torch.no_grad():
            torch.testing.assert_close(wide(src, tgt), full(src, tgt), rtol=0, atol=1e-5)
    narrow = make(2)
    with torch.no_grad():
        assert (narrow(src, tgt) - full(src, tgt)).abs().max() > 1e-3  # the window does something


def _input_grads(model, src, tgt, side, i):
    """d(output at position i) / d(embedded input at every position j), one layer, per j norm."""
    captured = {}
    module = model.encoder.embed if side == "encoder" else model.decoder.embed

    def keep(_m, _inp, out):
        out.retain_grad()
        captured["x"] = out

    handle = module.register_forward_hook(keep)
    try:
        if side == "encoder":
            out = model.encoder(src, src.eq(0))  # (B, S, D)
        else:
            out = model(src, tgt)  # (B, T, W)
    finally:
        handle.remove()
    g = torch.Generator().manual_seed(3)
    out[:, i].mul(torch.randn(out[:, i].shape, generator=g)).sum().backward()
    return captured["x"].grad.norm(dim=-1)  # (B, N)


@pytest.mark.parametrize("r", [1, 3])
def test_encoder_query_never_sees_keys_farther_than_r(r):
    """With one layer, encoder output i depends on input j only through self-attention (the FFN
    is per position), so a zero gradient means zero attention weight and vice versa."""
    model = make(r, n_layers=1)
    src, tgt = batch(pad_tail=False)
    s = src.size(1)
    for i in (0, 5, s - 1):
        grad = _input_grads(model, src, tgt, "encoder", i)  # (B, S)
        for j in range(s):
            if abs(i - j) > r:
                assert grad[:, j].abs().max() == 0, (i, j)
            else:
                assert grad[:, j].min() > 0, (i, j)


@pytest.mark.parametrize("r", [1, 3])
def test_decoder_query_sees_only_the_last_r_positions(r):
    model = make(r, n_layers=1)
    src, tgt = batch()
    t = tgt.size(1)
    for i in (0, 4, t - 1):
        grad = _input_grads(model, src, tgt, "decoder", i)  # (B, T)
        for j in range(t):
            if j > i or i - j > r:
                assert grad[:, j].abs().max() == 0, (i, j)
            else:
                assert grad[:, j].min() > 0, (i, j)


def test_receptive_field_grows_by_r_per_layer():
    """Table 1's price of restriction: the maximum path length is n / r; two layers reach 2r."""
    r = 2
    model = make(r, n_layers=2)
    src, tgt = batch(pad_tail=False)
    grad = _input_grads(model, src, tgt, "encoder", 5)[0]  # (S,)
    reached = [j for j in range(src.size(1)) if grad[j] > 0]
    assert reached == list(range(5 - 2 * r, 5 + 2 * r + 1))


def test_padding_rows_stay_finite():
    """A padding query farther than r from any real token would see no key (NaN without care)."""
    model = make(1)
    src, tgt = batch()
    src[1, 2:] = 0
    with torch.no_grad():
        assert torch.isfinite(model.encode(src).out).all()
        assert torch.isfinite(model(src, tgt)).all()


@pytest.mark.parametrize("r", [1, 3])
def test_cached_decoding_equals_full_forward_with_window(r):
    model = make(r)
    src, tgt = batch()
    with torch.no_grad():
        full = model(src, tgt)  # (B, T, W)
        memory = model.encode(src)
        cache, steps = None, []
        for k in range(tgt.size(1)):  # one token at a time
            logits, cache = model.decode_step(tgt[:, k : k + 1], memory, cache)
            steps.append(logits)
        torch.testing.assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-5)
        logits, cache = model.decode_step(tgt[:, :4], memory, None)  # a prefix, then a chunk
        rest, _ = model.decode_step(tgt[:, 4:], memory, cache)
        torch.testing.assert_close(torch.cat([logits, rest], 1), full, rtol=0, atol=1e-5)


def test_window_config_validation():
    from nmt.config import ConfigError, apply_overrides

    cfg = apply_overrides(tiny(50), {"attention_window": "4"}, section="model")
    assert cfg.attention_window == 4
    assert apply_overrides(cfg, {"attention_window": "none"}, section="model").attention_window is None
    with pytest.raises(ConfigError, match="attention_window"):
        apply_overrides(tiny(50), {"attention_window": "0"}, section="model")
