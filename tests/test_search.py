"""Beam search (section 6.1): exact hypotheses and scores on hand-built distributions, and the
invariances of the real model (beam 1 = greedy, batching, cache reuse)."""

import math
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from conftest import tol
from search_fixtures import EarlyEos

from nmt.config import tiny
from nmt.infer.beam_rows import beam_slots, fill_from_end
from nmt.infer.options import SearchOptions
from nmt.infer.search import (
    EOS,
    Ensemble,
    Hypothesis,
    RecomputePrefix,
    beam_search,
    greedy_search,
    length_penalty,
    max_score_bound,
    sample,
    sentence_rng,
)
from nmt.infer.topk import DIRECT_MAX, beam_topk, row_topk
from nmt.model import Transformer
from nmt.vocab import BOS, PAD

# kernel- and precision-sensitive: `make test` runs this file again on the AVX2-only path (conftest)
pytestmark = pytest.mark.numerics

A, B_ = 4, 5  # two ordinary tokens of the fake vocabulary (0 pad, 1 unk, 2 bos, 3 eos)
W = 6


def test_length_penalty_formula():
    assert length_penalty(1, 0.6) == 1.0  # ((5 + 1) / 6) ** alpha
    assert length_penalty(10, 0.6) == pytest.approx((15 / 6) ** 0.6)
    assert length_penalty(7, 0.0) == 1.0
    # bound over lengths t+1..max_len: the largest lp, i.e. lp(max_len) for alpha > 0
    assert max_score_bound(-2.0, 3, 10, 0.6) == pytest.approx(-2.0 / (15 / 6) ** 0.6)
    assert max_score_bound(-2.0, 3, 10, 0.0) == -2.0
    assert max_score_bound(-2.0, 3, 10, -0.5) == pytest.approx(-2.0 / (9 / 6) ** -0.5)


# ----------------------------------------------------------------------------- a fake model
@dataclass
class FakeMemory:
    src: torch.Tensor  # (B, S)

    def reorder(self, indices):
        return FakeMemory(self.src.index_select(0, indices))


@dataclass
class FakeCache:
    prefix: torch.Tensor  # (B, t) tokens fed so far

    def reorder(self, indices):
        return FakeCache(self.prefix.index_select(0, indices))


class FakeModel:
    """p(next | prefix) from ``tables[src[0]][prefix]`` (prefix = generated tokens, no BOS);
    a prefix missing from the table ends: p(EOS) = 1."""

    @dataclass
    class Cfg:
        max_positions: int = 64

    def __init__(self, tables):
        self.tables, self.cfg, self.steps, self.rows = tables, FakeModel.Cfg(), 0, []

    def encode(self, src):
        return FakeMemory(src)

    def decode_step(self, tokens, memory, cache):
        self.steps += 1
        self.rows.append(tokens.size(0))
        prefix = tokens if cache is None else torch.cat([cache.prefix, tokens], dim=1)
        probs = torch.zeros(prefix.size(0), 1, W)
        for row in range(prefix.size(0)):
            table = self.tables[int(memory.src[row, 0])]
            dist = table.get(tuple(prefix[row, 1:].tolist()), {EOS: 1.0})
            for tok, p in dist.items():
                probs[row, 0, tok] = p
        return probs.log(), FakeCache(prefix)


# One sentence where a longer output wins only with the length penalty, found after the beam
# already holds k=2 finished hypotheses (a search stopping at k finished would miss it).
LONG_WINS = {
    (): {EOS: 0.45, A: 0.5, B_: 0.05},
    (A,): {A: 0.95, EOS: 0.05},
    (A, A): {A: 0.95, EOS: 0.05},
    (A, A, A): {EOS: 0.95, A: 0.05},
}
L = math.log


def src(*first_tokens, length=3):
    return torch.tensor([[t] + [7] * (length - 2) + [EOS] for t in first_tokens])


def test_length_penalty_changes_the_winner():
    model = FakeModel({9: LONG_WINS})
    short = Hypothesis([], L(0.45), [L(0.45)])
    long_logp = [L(0.5), L(0.95), L(0.95), L(0.95)]
    [hyps] = beam_search(model, src(9), SearchOptions(beam=2, alpha=0.0, nbest=2, max_len_a=0, max_len_b=10))
    assert [h.tokens for h in hyps] == [[], [A, A, A]]
    assert hyps[0].score == pytest.approx(L(0.45))
    assert hyps[1].score == pytest.approx(sum(long_logp))
    assert hyps[1].positional_scores == pytest.approx(long_logp)
    [hyps] = beam_search(model, src(9), SearchOptions(beam=2, alpha=0.6, nbest=2, max_len_a=0, max_len_b=10))
    assert [h.tokens for h in hyps] == [[A, A, A], []]
    assert hyps[0].score == pytest.approx(sum(long_logp) / ((5 + 4) / 6) ** 0.6)  # |Y| = 4 with EOS
    assert hyps[1].score == pytest.approx(short.score)


def test_early_termination_is_exact_not_too_soon():
    """Trace (beam 2, alpha 0.6, max length 10): step 1 finishes [EOS]; step 2 finishes [B EOS]
    (2 finished = beam). The active [A A] (log p -0.744) could still reach -0.744/lp(10) = -0.43 >
    the worst finished, so the search goes on; step 4 finishes [A A A EOS] (-0.663), the best.
    Then the active [A A A A] (-3.79) is bounded by -3.79/lp(10) = -2.19 < -0.799: stop."""
    model = FakeModel({9: LONG_WINS})
    [hyps] = beam_search(model, src(9), SearchOptions(beam=2, alpha=0.6, nbest=2, max_len_a=0, max_len_b=10))
    # [B] (finished at step 2, score log(0.05)/lp(2)) was displaced: stopping once k=2
    # hypotheses were finished would have returned [[], [B]]
    assert [h.tokens for h in hyps] == [[A, A, A], []]
    assert model.steps == 4  # ...and the search stops as soon as the bound allows


def test_exact_stops_once_the_returned_nbest_cannot_change():
    """[EOS] finishes at step 1 with log p -0.105; the active [A] (-2.8) can end no higher (alpha 0),
    so with nbest=1 the output is final after one step; nbest=2 waits for a second finished
    hypothesis ([A EOS], step 2). The best output is the same either way."""
    table = {(): {EOS: 0.9, A: 0.06, B_: 0.04}}  # (A,) and (B,) are not in it: p(EOS) = 1 next
    model = FakeModel({9: table})
    [one] = beam_search(model, src(9), SearchOptions(beam=2, alpha=0.0, max_len_a=0, max_len_b=10))
    assert [h.tokens for h in one] == [[]] and model.steps == 1
    model = FakeModel({9: table})
    [two] = beam_search(model, src(9), SearchOptions(beam=2, alpha=0.0, nbest=2, max_len_a=0, max_len_b=10))
    assert [h.tokens for h in two] == [[], [A]] and model.steps == 2
    assert one[0].score == two[0].score


def test_first_step_runs_one_row_per_sentence():
    """At the first step the k beam rows of a sentence all hold BOS: the model sees B rows, then
    B*k; the result equals each sentence searched alone."""
    tables = {9: LONG_WINS, 11: {(): {A: 0.7, B_: 0.3}, (A,): {A: 1.0}}}
    model = FakeModel(tables)
    batch = beam_search(
        model, src(9, 11), SearchOptions(beam=2, alpha=0.6, nbest=2, max_len_a=0, max_len_b=6)
    )
    assert model.rows[:2] == [2, 4]
    for i, first in enumerate((9, 11)):
        [alone] = beam_search(
            FakeModel(tables), src(first), SearchOptions(beam=2, alpha=0.6, nbest=2, max_len_a=0, max_len_b=6)
        )
        assert [h.tokens for h in batch[i]] == [h.tokens for h in alone]


def test_fast_stopping_is_ctranslate2s_rule():
    """stopping="fast" on the trace above: at step 1 the best extension ([EOS], p 0.45) ranks
    below [A] (0.5), so the search goes on; at step 2 [B EOS] finishes the k=2nd hypothesis and
    the search stops, two steps before the exact rule, returning the [[], [B]] it warns of."""
    model = FakeModel({9: LONG_WINS})
    [hyps] = beam_search(
        model, src(9), SearchOptions(beam=2, alpha=0.6, nbest=2, max_len_a=0, max_len_b=10, stopping="fast")
    )
    assert [h.tokens for h in hyps] == [[], [B_]]
    assert model.steps == 2
    # the best extension is EOS at step 1: one finished hypothesis is enough for nbest=1
    eos_first = {(): {EOS: 0.6, A: 0.4}, (A,): {EOS: 0.99, A: 0.01}}
    model = FakeModel({9: eos_first})
    [hyps] = beam_search(
        model, src(9), SearchOptions(beam=2, alpha=0.0, max_len_a=0, max_len_b=10, stopping="fast")
    )
    assert [h.tokens for h in hyps] == [[]] and model.steps == 1
    # ...but not for nbest=2, which waits for a second finished hypothesis
    model = FakeModel({9: eos_first})
    [hyps] = beam_search(
        model, src(9), SearchOptions(beam=2, alpha=0.0, nbest=2, max_len_a=0, max_len_b=10, stopping="fast")
    )
    assert [h.tokens for h in hyps] == [[], [A]] and model.steps == 2
    with pytest.raises(ValueError, match="stopping"):
        beam_search(model, src(9), SearchOptions(beam=2, alpha=0.6, stopping="soon"))


def test_max_length_finalizes_active_and_min_length():
    model = FakeModel(
        {
            9: {
                (): {A: 0.9, EOS: 0.1},
                (A,): {A: 0.9, EOS: 0.1},
                (A, A): {A: 0.5, EOS: 0.5},
                (A, A, A): {A: 0.9, EOS: 0.1},
            }
        }
    )
    # max length 3 (a=1 * |x|=2 + b=1): at step 3 only EOS may be chosen, scored with its real p
    [hyps] = beam_search(
        model, src(9, length=2), SearchOptions(beam=2, alpha=0.0, nbest=2, max_len_a=1, max_len_b=1)
    )
    assert [h.tokens for h in hyps] == [[A, A], []]
    assert hyps[0].score == pytest.approx(2 * L(0.9) + L(0.5))
    assert model.steps == 3
    # min_len = max length: no early EOS, the output length is fixed
    [hyps] = beam_search(
        model,
        src(9, length=2),
        SearchOptions(beam=2, alpha=0.0, nbest=2, max_len_a=0, max_len_b=4, min_len=4),
    )
    assert [h.tokens for h in hyps] == [[A, A, A]]  # the only finite-probability output
    assert hyps[0].score == pytest.approx(2 * L(0.9) + L(0.5) + L(0.1))


def test_batch_of_fake_sentences_and_finished_rows_dropped():
    """Three sentences with different tables searched together equal each searched alone."""
    tables = {9: LONG_WINS, 10: {(): {B_: 0.6, EOS: 0.4}}, 11: {(): {A: 0.7, B_: 0.3}, (A,): {A: 1.0}}}
    batch = beam_search(
        FakeModel(tables), src(9, 10, 11), SearchOptions(beam=2, alpha=0.6, nbest=2, max_len_a=0, max_len_b=6)
    )
    for i, first in enumerate((9, 10, 11)):
        [alone] = beam_search(
            FakeModel(tables), src(first), SearchOptions(beam=2, alpha=0.6, nbest=2, max_len_a=0, max_len_b=6)
        )
        assert [(h.tokens, round(h.score, 9)) for h in batch[i]] == [
            (h.tokens, round(h.score, 9)) for h in alone
        ]
    assert batch[1][0].tokens == [B_] and batch[2][0].tokens == [A, A]


# ----------------------------------------------------------------------------- the real model
def padded(rows):
    n = max(map(len, rows))
    return torch.tensor([r + [0] * (n - len(r)) for r in rows])  # (B, S)


@pytest.fixture(scope="module")
def sources():
    g = torch.Generator().manual_seed(1)
    return [torch.randint(4, 40, (n,), generator=g).tolist() + [EOS] for n in (2, 11, 5, 16, 8)]


def plain_greedy(model, src, max_len):
    """Argmax each step, re-running the whole prefix, until EOS or max_len (forced EOS)."""
    memory = model.encode(torch.tensor([src]))
    out = [2]
    for t in range(max_len):
        logits, _ = model.decode_step(torch.tensor([out]), memory, None)
        tok = EOS if t + 1 == max_len else int(logits[0, -1].argmax())
        if tok == EOS:
            return out[1:]
        out.append(tok)


@torch.no_grad()
def test_beam1_is_greedy(early_eos_model, sources):
    hyps = greedy_search(early_eos_model, padded(sources), SearchOptions(max_len_a=1, max_len_b=6))
    assert [h.tokens for h in hyps] == [plain_greedy(early_eos_model, s, len(s) + 6) for s in sources]
    assert any(len(h.tokens) < len(s) + 5 for h, s in zip(hyps, sources))  # some stop early
    for h, s in zip(hyps, sources):  # score: the model's log-probability of the output and EOS
        memory = early_eos_model.encode(torch.tensor([s]))
        logits, _ = early_eos_model.decode_step(torch.tensor([[2] + h.tokens]), memory, None)
        logp = torch.log_softmax(logits[0].float(), dim=-1)  # (|Y|, W)
        want = logp.gather(1, torch.tensor(h.tokens + [EOS])[:, None]).squeeze(1)
        assert h.positional_scores == pytest.approx(want.tolist(), abs=1e-4)
        assert h.score == pytest.approx(float(want.sum()), abs=1e-4)


def test_same_alone_and_in_batch(early_eos_model, sources):
    batch = beam_search(
        early_eos_model, padded(sources), SearchOptions(beam=4, alpha=0.6, nbest=3, max_len_b=6)
    )
    for s, hyps in zip(sources, batch):
        [alone] = beam_search(
            early_eos_model, padded([s]), SearchOptions(beam=4, alpha=0.6, nbest=3, max_len_b=6)
        )
        assert [h.tokens for h in hyps] == [h.tokens for h in alone]
        assert [h.score for h in hyps] == pytest.approx([h.score for h in alone], abs=1e-4)


@pytest.mark.parametrize("alpha", [0.6, 0.0, -0.5])
@pytest.mark.parametrize("with_prefix", [False, True])
def test_exact_nbest_is_the_best_of_a_longer_search(early_eos_model, sources, alpha, with_prefix):
    """Stopping once the returned nbest can no longer change gives the best hypotheses of the
    search that waits for k finished ones (nbest=k), on the real model: with and without a length
    penalty, a negative one (whose bound uses the next length), and a forced prefix."""
    prefix = [[5, 6], [], [7], [8, 9, 10], []] if with_prefix else None
    opts = SearchOptions(beam=4, alpha=alpha, max_len_b=6)
    four = beam_search(early_eos_model, padded(sources), opts.replace(nbest=4), prefix=prefix)
    for nbest in (1, 2):
        fewer = beam_search(early_eos_model, padded(sources), opts.replace(nbest=nbest), prefix=prefix)
        for a, b in zip(fewer, four):
            assert [h.tokens for h in a] == [h.tokens for h in b[:nbest]]
            assert [h.score for h in a] == pytest.approx([h.score for h in b[:nbest]], abs=1e-5)
    if prefix is not None:
        assert all(h[0].tokens[: len(p)] == p for h, p in zip(four, prefix))


def test_sentences_ending_at_the_first_step(early_eos_model, sources):
    """Max length 1 for the 2-token source (max_len_a 0.5, b 0): it ends at the first step, which
    runs one row per sentence; the others go on with their cache expanded to k rows each. The
    result equals each sentence searched alone and the search re-running the whole prefix."""
    opts = SearchOptions(beam=4, alpha=0.6, max_len_a=0.5, max_len_b=0, nbest=2)
    batch = beam_search(early_eos_model, padded(sources), opts)
    assert [len(h[0].tokens) for h in batch][0] == 0  # |Y| = 1: only EOS
    naive = beam_search(EarlyEos(RecomputePrefix(early_eos_model.inner)), padded(sources), opts)
    for s, hyps, other in zip(sources, batch, naive):
        [alone] = beam_search(early_eos_model, padded([s]), opts)
        assert [h.tokens for h in hyps] == [h.tokens for h in alone] == [h.tokens for h in other]
        assert [h.score for h in hyps] == pytest.approx([h.score for h in alone], abs=1e-4)


def test_cache_reuse_equals_recomputing_prefix(early_eos_model, sources):
    assert isinstance(early_eos_model.inner, Transformer)
    cached = beam_search(
        early_eos_model, padded(sources), SearchOptions(beam=3, alpha=0.6, nbest=3, max_len_b=5)
    )
    naive = beam_search(
        EarlyEos(RecomputePrefix(early_eos_model.inner)),
        padded(sources),
        SearchOptions(beam=3, alpha=0.6, nbest=3, max_len_b=5),
    )
    for a, b in zip(cached, naive):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


@pytest.mark.parametrize("width", [8000, 8003, 200, 40])
@pytest.mark.parametrize("k", [1, 8])
def test_row_topk_is_topk(width, k):
    """The two-stage top-k of the search step gives torch.topk's values, and columns holding them:
    random rows, rows of one repeated value, rows with -inf, the maximum in the tail columns."""
    torch.manual_seed(width + k)
    x = torch.randn(50, width)
    x[1] = 0.5  # all equal
    x[2, : width // 2] = float("-inf")
    x[3] = float("-inf")
    x[4, -1] = 100.0  # in the tail when width % 64 != 0
    x[5] = torch.randint(0, 3, (width,)).float()  # many ties
    want = x.topk(k, dim=-1)
    values, cols = row_topk(x, k)
    assert torch.equal(values, want.values)
    assert torch.equal(x.gather(1, cols), values)  # the columns hold those values
    assert all(len(set(r)) == k for r in cols.tolist())  # k distinct columns per row
    assert torch.equal(cols[[0, 4, 6, 7]], want.indices[[0, 4, 6, 7]])  # no ties: the same columns


@pytest.mark.parametrize("width", [8000, 8003, 300, 40])
@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("direct_max", [0, DIRECT_MAX])
def test_beam_topk_is_topk_over_the_beam(width, k, direct_max):
    """The per-sentence selection (two stages, or one top-k for a step of at most ``direct_max``
    entries) gives the values of a plain top-k over every (row, token) of a sentence, and (row,
    token, log-prob) triples holding them: random rows, placeholder rows (score -inf), rows of
    -inf, ties, the best entries in the tail columns."""
    torch.manual_seed(width * 10 + k)
    b, n = 30, 2 * k
    logp = torch.randn(b * k, width)
    logp[1] = 0.5  # all equal
    logp[2, : width // 2] = float("-inf")
    logp[3] = float("-inf")
    logp[4, -1] = 50.0  # in the tail when width % 64 != 0
    logp[5] = torch.randint(0, 3, (width,)).float()  # many ties
    scores = torch.randn(b, k) * 3
    scores[0, 1:] = float("-inf")  # the first step's placeholder rows
    want = (scores[:, :, None] + logp.view(b, k, width)).view(b, k * width).topk(n, dim=1).values
    top_scores, top_beam, top_tok, top_logp = beam_topk(logp, scores, n, direct_max=direct_max)
    assert torch.equal(top_scores, want)
    rows = top_beam + torch.arange(b)[:, None] * k  # (B, n)
    assert torch.equal(top_logp, logp[rows, top_tok])
    assert torch.equal(top_scores, scores.gather(1, top_beam) + top_logp)
    finite = top_scores.isfinite()  # distinct extensions (the -inf ones may repeat)
    pairs = [set(zip(r[f].tolist(), t[f].tolist())) for r, t, f in zip(top_beam, top_tok, finite)]
    assert [len(p) for p in pairs] == finite.sum(dim=1).tolist()


def test_beam_search_same_with_block_selection(monkeypatch):
    """A model with a 300-token vocabulary (four blocks of 64 and a tail of 44): the search with the
    two-stage selection equals the search with the per-row one (block wider than the vocabulary)."""
    torch.manual_seed(3)
    inner = Transformer(tiny(300)).eval()
    g = torch.Generator().manual_seed(4)
    srcs = [torch.randint(4, 300, (n,), generator=g).tolist() + [EOS] for n in (3, 9, 6, 12)]
    import nmt.infer.search as search

    plain = search.beam_topk
    monkeypatch.setattr(search, "beam_topk", lambda logp, scores, n: plain(logp, scores, n, direct_max=0))
    fast = beam_search(EarlyEos(inner), padded(srcs), SearchOptions(beam=4, alpha=0.6, nbest=2, max_len_b=6))
    monkeypatch.setattr(search, "beam_topk", lambda logp, scores, n: plain(logp, scores, n, block=10**6))
    slow = beam_search(EarlyEos(inner), padded(srcs), SearchOptions(beam=4, alpha=0.6, nbest=2, max_len_b=6))
    for a, b in zip(fast, slow):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-6)


def test_beam_slots_keep_each_best_child_in_its_parents_row():
    # parents of the new hypotheses, best first -> rank placed in each row
    assert beam_slots(torch.tensor([[0, 0, 1, 3]])).tolist() == [
        [0, 2, 1, 3]
    ]  # row 2 (no child) takes rank 1
    assert beam_slots(torch.tensor([[2, 2, 2, 2]])).tolist() == [[1, 2, 0, 3]]  # best child stays in row 2
    assert beam_slots(torch.tensor([[3, 2, 1, 0], [0, 1, 2, 3]])).tolist() == [[3, 2, 1, 0], [0, 1, 2, 3]]
    g = torch.Generator().manual_seed(0)
    parent = torch.randint(0, 5, (200, 5), generator=g)  # (B, k)
    order = beam_slots(parent)  # (B, k)
    assert torch.equal(order.sort(dim=1).values, torch.arange(5).expand(200, 5))  # a permutation per sentence
    placed_parent = parent.gather(1, order)  # (B, k) parent of the hypothesis in each row
    for row_parents, ranks, parents in zip(placed_parent.tolist(), order.tolist(), parent.tolist()):
        for p in set(parents):  # a row's best child sits in that row
            best = parents.index(p)
            assert ranks[p] == best and row_parents[p] == p


@pytest.mark.parametrize("k", [1, 2, 4, 5])
def test_beam_slots_by_loop_equal_the_vectorised_placement(k):
    """A small beam is placed by a loop over lists (beam_slots' loop_max): the same permutation
    as the vectorised placement, on every parent pattern of random beams and on the fixed ones."""
    g = torch.Generator().manual_seed(k)
    parent = torch.randint(0, k, (300, k), generator=g)  # (B, k)
    parent[0] = 0  # every child from row 0
    parent[1] = torch.arange(k).flip(0)  # each row one child, in reverse
    assert torch.equal(beam_slots(parent, loop_max=10**6), beam_slots(parent, loop_max=0))
    assert beam_slots(torch.tensor([[0, 0, 1, 3]]), loop_max=10**6).tolist() == [[0, 2, 1, 3]]


def test_fill_from_end_moves_only_the_last_sentences_into_gaps():
    assert fill_from_end([0, 2, 3, 5], 6) == [0, 5, 2, 3]
    assert fill_from_end([1, 2, 3], 4) == [3, 1, 2]
    assert fill_from_end([0, 1], 5) == [0, 1]
    assert fill_from_end([4], 5) == [4]


class Functional:
    """Wraps a model so that its memory and cache only have the functional ``reorder`` (copies),
    not ``reorder_`` (in place): the search must give the same results either way."""

    @dataclass
    class State:
        inner: object

        def reorder(self, indices):
            return Functional.State(self.inner.reorder(indices))

    def __init__(self, inner):
        self.inner, self.cfg = inner, inner.cfg

    def encode(self, src):
        return Functional.State(self.inner.encode(src))

    def decode_step(self, tokens, memory, cache):
        logits, cache = self.inner.decode_step(tokens, memory.inner, None if cache is None else cache.inner)
        return logits, Functional.State(cache)


class MildEos(EarlyEos):
    """+2.5 on the EOS logit after a token id divisible by 5: some outputs end early, others run on."""

    def decode_step(self, tokens, memory, cache):
        logits, cache = self.inner.decode_step(tokens, memory, cache)  # (B, T, W)
        eos = torch.arange(logits.size(-1)) == EOS  # (W,)
        return logits + 2.5 * (tokens[:, :, None] % 5 == 0) * eos, cache


@pytest.mark.parametrize("beam, stopping", [(4, "exact"), (4, "fast"), (3, "exact"), (1, "exact")])
@pytest.mark.parametrize("wrap", [lambda m: m, MildEos])
def test_in_place_reorder_gives_the_search_of_copies(random_transformer, beam, stopping, wrap):
    """Beam rows kept in their rows, finished sentences' gaps filled from the end, caches and
    memory reordered in place: the hypotheses and scores of the search over copied caches (nine
    sentences finishing at different steps: at their max length, or earlier with MildEos)."""
    g = torch.Generator().manual_seed(5)
    srcs = [torch.randint(4, 40, (n,), generator=g).tolist() + [EOS] for n in (1, 9, 3, 12, 6, 2, 8, 4, 10)]
    opts = SearchOptions(
        beam=beam, alpha=0.6 if beam > 1 else 0.0, max_len_b=3, nbest=min(beam, 2), stopping=stopping
    )
    in_place = beam_search(wrap(random_transformer), padded(srcs), opts)
    copies = beam_search(Functional(wrap(random_transformer)), padded(srcs), opts)
    assert len({len(h[0].tokens) for h in in_place}) > 3  # sentences end at different steps
    for a, b in zip(in_place, copies):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-6)


# ----------------------------------------------------------------------------- ensembles
def ensemble_reference(models, src: torch.Tensor, prefix: list[int]) -> torch.Tensor:
    """The ensemble's next-token log-probabilities after ``prefix`` for one source (1, S), from each
    model's full forward (no cache, no search code): log_softmax of the mean of the models'
    log-probabilities (a log-linear combination, renormalised)."""
    tgt = torch.tensor([[BOS, *prefix]])
    logps = [F.log_softmax(m(src, tgt)[0, -1].float(), dim=-1) for m in models]  # M x (W,)
    return F.log_softmax(torch.stack(logps).mean(dim=0), dim=-1)


def reference_score(models, src: torch.Tensor, tokens: list[int], alpha: float) -> float:
    """log p(Y, EOS | x) under ensemble_reference over ((5 + |Y|) / 6) ** alpha (|Y| with EOS)."""
    target = [*tokens, EOS]
    logp = sum(ensemble_reference(models, src, target[:t])[target[t]].item() for t in range(len(target)))
    return logp / ((5 + len(target)) / 6) ** alpha


@torch.no_grad()
def test_an_ensemble_of_two_different_models_searches_their_averaged_log_probabilities():
    """Two models of different weights, the second sharper (its logits three times as large): the
    ensemble's greedy output is the argmax path of the renormalised mean of the two models' log-
    probabilities computed by hand from full forwards, and every beam-4 hypothesis scores what that
    reference gives its tokens. Averaging probabilities (a linear mix) fails it, as does searching
    one model's memory or cache with the other's weights. Averaging raw logits is the same
    distribution (mean log_softmax(l_m) = mean l_m - a constant per row, removed by the renormalising
    log_softmax), so it cannot fail this test, nor is it wrong."""
    torch.manual_seed(1)
    m1 = Transformer(tiny(24)).eval()
    torch.manual_seed(2)
    m2 = Transformer(tiny(24)).eval()
    with torch.no_grad():  # a sharper second model: its decoder's last LayerNorm gains x 3 scale its logits
        m2.decoder.layers[-1].final_layer_norm.weight.mul_(3.0)
    ensemble = Ensemble([m1, m2])
    sources = torch.tensor([[5, 9, 12, 7, EOS], [8, 8, 20, EOS, PAD]])
    cfg = m1.cfg
    # float32 (no autocast): a cached step against a full forward, through the encoder and the
    # decoder's layers (d_model + d_ff each, and the positions attended) and the vocabulary's
    # log-sum-exp; |log p| <= ~10 per token, <= 8 tokens per score
    n_accum = 2 * cfg.n_layers * (cfg.d_model + cfg.d_ff + 16) + cfg.tgt_vocab_size
    score_tol = 8 * tol(torch.float32, n_accum, scale=10.0)
    greedy = greedy_search(ensemble, sources, SearchOptions(max_len_a=0, max_len_b=8))
    beams = beam_search(
        ensemble, sources, SearchOptions(beam=4, alpha=0.6, nbest=4, max_len_a=0, max_len_b=8)
    )
    for i, (hyp, nbest) in enumerate(zip(greedy, beams)):
        src = sources[i : i + 1, : int(sources[i].ne(PAD).sum())]
        path: list[int] = []
        while len(path) < 7:  # the 8th token may only be EOS
            logp = ensemble_reference([m1, m2], src, path)
            logp[[PAD, BOS]] = float("-inf")
            token = int(logp.argmax())
            if token == EOS:
                break
            path.append(token)
        assert hyp.tokens == path
        assert hyp.score == pytest.approx(reference_score([m1, m2], src, path, 0.0), abs=score_tol)
        assert len(nbest) == 4 and len({tuple(h.tokens) for h in nbest}) == 4
        for h in nbest:
            assert h.score == pytest.approx(reference_score([m1, m2], src, h.tokens, 0.6), abs=score_tol)
    # the two members disagree, so the test tells one member, or a mix of them, from the ensemble
    assert (
        greedy_search(m1, sources, SearchOptions(max_len_a=0, max_len_b=8)) != greedy
        or greedy_search(m2, sources, SearchOptions(max_len_a=0, max_len_b=8)) != greedy
    )


# ----------------------------------------------------------------------------- the n-gram block
def looping_table(depth: int = 10) -> dict:
    """A model that loops A B A B ...: after A, p(B) = 0.6, p(A) = 0.3; after B (or at the start),
    p(A) = 0.6, p(B) = 0.3; p(EOS) = 0.1 always."""
    table, frontier = {}, [()]
    for _ in range(depth):
        nxt = []
        for prefix in frontier:
            last_a = bool(prefix) and prefix[-1] == A
            table[prefix] = {B_: 0.6, A: 0.3, EOS: 0.1} if last_a else {A: 0.6, B_: 0.3, EOS: 0.1}
            nxt += [prefix + (A,), prefix + (B_,)]
        frontier = nxt
    return {9: table}


def repeats_an_ngram(tokens: list[int], n: int) -> bool:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


def test_no_repeat_ngram_forbids_the_tokens_that_would_repeat_one():
    """Greedy, by hand: A, B, A (B A is new), then B would repeat A B: A (0.3), then A and B would
    both repeat a bigram: EOS. Without the block the model loops to the length limit."""
    greedy = SearchOptions(beam=1, alpha=0.0, max_len_a=0, max_len_b=9)
    [[loop]] = beam_search(FakeModel(looping_table()), src(9), greedy)
    assert loop.tokens == [A, B_, A, B_, A, B_, A, B_]  # 8 tokens and the forced EOS
    [[blocked]] = beam_search(FakeModel(looping_table()), src(9), greedy.replace(no_repeat_ngram=2))
    assert blocked.tokens == [A, B_, A, A]
    assert blocked.score == pytest.approx(L(0.6) + L(0.6) + L(0.6) + L(0.3) + L(0.1))
    # beam search: no hypothesis of the n-best repeats a trigram; sampling alike
    beam = SearchOptions(beam=4, nbest=4, max_len_a=0, max_len_b=9, no_repeat_ngram=3)
    [nbest] = beam_search(FakeModel(looping_table()), src(9), beam)
    assert len(nbest) == 4 and not any(repeats_an_ngram(h.tokens, 3) for h in nbest)
    assert any(
        repeats_an_ngram(h.tokens, 3)
        for h in beam_search(FakeModel(looping_table()), src(9), beam.replace(no_repeat_ngram=0))[0]
    )
    drawn = sample(
        FakeModel(looping_table()),
        src(*[9] * 20),
        beam.replace(beam=1, nbest=1),
        rngs=[sentence_rng(0, i) for i in range(20)],
    )
    assert not any(repeats_an_ngram(h.tokens, 3) for h in drawn)


def test_no_repeat_ngram_keeps_a_prefix_as_given():
    greedy = SearchOptions(beam=1, alpha=0.0, max_len_a=0, max_len_b=9, no_repeat_ngram=2)
    [[h]] = beam_search(FakeModel(looping_table()), src(9), greedy, prefix=[[A, B_, A, B_]])
    assert h.tokens[:4] == [A, B_, A, B_] and not repeats_an_ngram(h.tokens[3:], 2)
