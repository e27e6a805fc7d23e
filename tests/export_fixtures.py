"""What the export tests share: a random-weight model with non-trivial LayerNorms, and the judge of an
exported model's beam search against nmt's (beam_fidelity)."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from conftest import tol

from nmt.checkpoint import load_model, save
from nmt.config import tiny
from nmt.model import Transformer


def random_checkpoint(tmp_path, src_ckpt, **changes):
    """A random-weight tiny model with ``changes`` (e.g. pre-norm), saved with the spm of src_ckpt."""
    from nmt.checkpoint import resolve_checkpoint

    _, config = load_model(src_ckpt)
    cfg = dataclasses.replace(tiny(config["model"]["tgt_vocab_size"]), **changes)
    torch.manual_seed(0)
    model = Transformer(cfg)
    with torch.no_grad():  # non-trivial LayerNorm gains and biases
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return save(
        tmp_path / "ckpt",
        model=model,
        spm_model=resolve_checkpoint(src_ckpt) / "spm.model",
        config={"model": dataclasses.asdict(cfg), "train": {}, "data": {}},
    )


# ----------------------------------------------------------------------------- beam 4 with the length penalty
BEAM_B = (
    10  # max_len_b: |Y| <= |x| + 10 (|x| with EOS), so the tiny model's repetitive outputs meet the limit
)


def beam_fidelity(translator, lines: list[str], ours: list[str], theirs: list[str], alpha: float) -> tuple:
    """An exported model's beam-4 outputs ``theirs`` against nmt's ``ours``: (lines identical, lines
    whose difference is not explained by the length penalties; below).

    CTranslate2 and HF Marian divide log p(Y | x) by |Y| ** alpha; nmt by GNMT's ((5 + |Y|) / 6) **
    alpha (|Y| with EOS). The two penalties rank outputs of different lengths differently, which
    also changes what stays in the beam, so under alpha > 0 some lines differ by design (4 and 10 of
    40 here). Beam search is not exact either: either engine may miss an output the other finds.
    A difference is unexplained when their output is worse than nmt's under both penalties (its
    own and nmt's), both scored by nmt's model: a wrong model or a wrong search chooses such
    outputs, and so, now and then, does an approximate search that lost the better output from its
    beam (CTranslate2 also stops as --stopping fast). At alpha = 0 the two penalties are one. An
    output at its length limit is left out: there nmt ends with EOS, CTranslate2 cuts and
    rescores, HF cuts without EOS. The tests allow 2 unexplained lines in 40 (5%): measured 0 on
    the Zen 4's own kernels and 1 under the forced AVX2 path (CTranslate2 kept 'teertsen teertsen
    teertsen' where nmt's 'syalpen teertsen teertsen' is better under both); a broken export or
    search gives more (checked: 4 when CTranslate2 ignores alpha, 17 and 23 with HF's output bias
    perturbed)."""
    cfg = translator.model.cfg
    # fp32 scores of <= |x| + 10 ~ 30 tokens, each a log_softmax (|log p| <= ~10) after 2 x layers x
    # (d_model + d_ff) accumulations: what two engines' kernels may disagree by on one output
    n_accum = 2 * cfg.n_layers * (cfg.d_model + cfg.d_ff) + cfg.tgt_vocab_size
    slack = 30 * tol(torch.float32, n_accum, scale=10.0)
    same = unexplained = 0
    for line, a, b in zip(lines, ours, theirs):
        if a == b:
            same += 1
            continue
        (src,), _ = translator.encode([line])
        limit = len(src) + BEAM_B
        scored = []
        for text in (a, b):
            ids = translator.sp.encode(text) if text else []
            with torch.inference_mode():
                logits = translator.model(torch.tensor([src]), torch.tensor([[2] + ids]))[0]
            target = torch.tensor(ids + [3])
            scored.append(
                (
                    F.log_softmax(logits.float(), -1)[torch.arange(len(target)), target].sum().item(),
                    len(target),
                )
            )
        (lp_a, n_a), (lp_b, n_b) = scored
        if max(n_a, n_b) >= limit - 1:  # at the limit (re-encoded text may count one piece fewer)
            continue
        worse_for_nmt = lp_b / ((5 + n_b) / 6) ** alpha < lp_a / ((5 + n_a) / 6) ** alpha - slack
        worse_for_them = lp_b / n_b**alpha < lp_a / n_a**alpha - slack
        unexplained += worse_for_nmt and worse_for_them
    return same, unexplained
