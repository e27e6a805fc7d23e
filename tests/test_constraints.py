"""Hard lexical constraints (nmt.infer.constraints): dynamic beam allocation on hand-built
distributions, the unconstrained search unchanged, clear errors, the Translator API and
`nmt translate --constraints` on a tiny random-weight checkpoint."""

import argparse
import itertools
import math
import random
from dataclasses import dataclass

import pytest
import torch

from nmt.infer.constraints import row_argmax
from nmt.infer.options import SearchOptions
from nmt.infer.search import EOS, beam_search, length_penalty

A, B_, C_, D_, E_, F_ = (
    4,
    5,
    6,
    7,
    8,
    9,
)  # ordinary tokens of the fake vocabulary (0 pad, 1 unk, 2 bos, 3 eos)
W = 10
L = math.log


# ----------------------------------------------------------------------------- a bigram model
@dataclass
class FakeMemory:
    src: torch.Tensor  # (B, S)

    def reorder(self, indices):
        return FakeMemory(self.src.index_select(0, indices))


@dataclass
class Prefix:
    tokens: torch.Tensor  # (B, t) tokens fed so far, BOS first

    def reorder(self, indices):
        return Prefix(self.tokens.index_select(0, indices))


class Fake:
    """p(next | output so far) = ``dist(src[0], prefix)``, a (W,) tensor with every entry > 0 (so
    that a constraint token can always be forced); ``prefix`` holds BOS (2) first."""

    @dataclass
    class Cfg:
        max_positions: int = 64

    def __init__(self, dist):
        self.dist, self.cfg = dist, Fake.Cfg()

    def encode(self, src):
        return FakeMemory(src)

    def decode_step(self, tokens, memory, cache):
        prefix = tokens if cache is None else torch.cat([cache.tokens, tokens], dim=1)  # (B, t)
        rows = [self.dist(int(s), tuple(p)) for s, p in zip(memory.src[:, 0].tolist(), prefix.tolist())]
        return torch.stack(rows).log()[:, None, :], Prefix(prefix)  # (B, 1, W)


def Bigram(tables):
    """p(next | last token) from ``tables[src[0]]`` (W, W)."""
    return Fake(lambda first, prefix: tables[first][prefix[-1]])


def table(prefs: dict[int, dict[int, float]], floor: float = 1e-3) -> torch.Tensor:
    """A (W, W) bigram table: row ``last`` holds ``prefs[last]`` (token -> probability) and
    ``floor`` on every other token (PAD, UNK, BOS included: the search masks those)."""
    t = torch.full((W, W), floor, dtype=torch.float64)
    for last, dist in prefs.items():
        for tok, p in dist.items():
            t[last, tok] = p
    return (t / t.sum(dim=1, keepdim=True)).float()


def src(*first_tokens, length=3):
    return torch.tensor([[t] + [7] * (length - 2) + [EOS] for t in first_tokens])


def meets(tokens: list[int], phrases: list[list[int]]) -> bool:
    """Whether ``tokens`` hold every phrase contiguously at places that do not overlap."""

    def place(todo: list[list[int]], used: frozenset) -> bool:
        if not todo:
            return True
        p, rest = todo[0], todo[1:]
        for i in range(len(tokens) - len(p) + 1):
            span = frozenset(range(i, i + len(p)))
            if tokens[i : i + len(p)] == p and not span & used and place(rest, used | span):
                return True
        return False

    return place(sorted(phrases, key=len, reverse=True), frozenset())


def logp_of(model_table: torch.Tensor, tokens: list[int]) -> list[float]:
    """The bigram model's log-probability of each token of ``tokens`` + EOS after BOS."""
    seq = [2] + tokens + [EOS]
    return [float(model_table[a, b].log()) for a, b in zip(seq, seq[1:])]


def best_meeting(model_table: torch.Tensor, phrases, max_len: int, alpha: float) -> tuple[list[int], float]:
    """The best-scoring output of at most max_len tokens (EOS included) meeting ``phrases``, by
    enumerating every output over the ordinary tokens."""
    best = (None, -math.inf)
    for n in range(max_len):
        for toks in itertools.product(range(A, W), repeat=n):
            if meets(list(toks), phrases):
                score = sum(logp_of(model_table, list(toks))) / length_penalty(n + 1, alpha)
                if score > best[1]:
                    best = (list(toks), score)
    return best


# The model prefers to stop at once ([] then EOS), and writes C after D, D after B.
STOP_EARLY = table(
    {
        2: {EOS: 0.7, B_: 0.1, D_: 0.1, A: 0.1},
        B_: {D_: 0.6, EOS: 0.3},
        D_: {C_: 0.6, EOS: 0.3},
        C_: {EOS: 0.9},
        A: {A: 0.5, EOS: 0.4},
    }
)


def test_every_phrase_appears_in_the_models_order_not_the_given_one():
    """Constraints [C] and [D] (given in that order): the model writes D then C, and so does the
    constrained search; [C], [B D] gives B D C. Outputs and scores are those of the best output
    meeting the constraints (found here by enumeration), the unconstrained one being []."""
    model = Bigram({9: STOP_EARLY})
    [[free]] = beam_search(model, src(9), SearchOptions(beam=4, alpha=0.6, max_len_a=0, max_len_b=6))
    assert free.tokens == []
    for phrases, want in (([[C_], [D_]], [D_, C_]), ([[C_], [B_, D_]], [B_, D_, C_])):
        [hyps] = beam_search(
            Bigram({9: STOP_EARLY}),
            src(9),
            SearchOptions(beam=4, alpha=0.6, max_len_a=0, max_len_b=6),
            constraints=[phrases],
        )
        tokens, score = best_meeting(STOP_EARLY, phrases, 6, 0.6)
        assert hyps[0].tokens == tokens == want
        assert hyps[0].positional_scores == pytest.approx(logp_of(STOP_EARLY, want), abs=1e-5)
        assert hyps[0].score == pytest.approx(score, abs=1e-5)


def test_multi_piece_phrase_stays_contiguous():
    """The model writes B A D; the constraint [B D] must appear as B D: B D (p after B of D:
    0.05) is the best output holding it, not B A D, which holds B and D apart."""
    gap = table({2: {B_: 0.9}, B_: {A: 0.9, D_: 0.05}, A: {D_: 0.9}, D_: {EOS: 0.9}})
    [[free]] = beam_search(
        Bigram({9: gap}), src(9), SearchOptions(beam=4, alpha=0.6, max_len_a=0, max_len_b=6)
    )
    assert free.tokens == [B_, A, D_]
    [hyps] = beam_search(
        Bigram({9: gap}),
        src(9),
        SearchOptions(beam=4, alpha=0.6, nbest=4, max_len_a=0, max_len_b=6),
        constraints=[[[B_, D_]]],
    )
    assert hyps[0].tokens == best_meeting(gap, [[B_, D_]], 6, 0.6)[0] == [B_, D_]
    assert all(meets(h.tokens, [[B_, D_]]) for h in hyps) and len(hyps) == 4


def test_beam_allocation_keeps_the_unlikely_start():
    """Dynamic beam allocation, beam 2: C is unlikely first (0.02) and almost impossible after A or
    B (0.001), but C then EOS is likely. The 2 best extensions at step 1 are A and B; the bank of
    one constraint token keeps C anyway (round-robin over the banks: C, then A), so the search
    returns [C] (log 0.02 + log 0.9), the best output holding C. Without the banks, C would be
    written at the last steps after A A ... (log 0.001 for C alone)."""
    model_table = table(
        {2: {A: 0.5, B_: 0.4, C_: 0.02}, A: {A: 0.6, B_: 0.3}, B_: {A: 0.6, B_: 0.3}, C_: {EOS: 0.9}}
    )
    [hyps] = beam_search(
        Bigram({9: model_table}),
        src(9),
        SearchOptions(beam=2, alpha=0.6, max_len_a=0, max_len_b=6),
        constraints=[[[C_]]],
    )
    tokens, score = best_meeting(model_table, [[C_]], 6, 0.6)
    assert hyps[0].tokens == tokens == [C_]
    assert hyps[0].score == pytest.approx(score, abs=1e-5)


def test_phrase_found_after_a_false_start():
    """The model writes A A A B; the constraint [A A B] is met there: after A A A its progress
    falls back to the longest suffix that starts the phrase (A A), not to nothing or A, so A A A
    B and EOS fit the maximum length of 5 and the search returns the model's own best output."""
    want = {(2,): A, (2, A): A, (2, A, A): A, (2, A, A, A): B_}

    def dist(first, prefix):
        p = torch.full((W,), 1e-3)
        p[want.get(prefix, EOS)] = 0.9
        return p / p.sum()

    [hyps] = beam_search(
        Fake(dist),
        src(9),
        SearchOptions(beam=2, alpha=0.0, max_len_a=0, max_len_b=5),
        constraints=[[[A, A, B_]]],
    )
    assert hyps[0].tokens == [A, A, A, B_]


def test_constraints_forced_into_the_last_steps():
    """Phrases of 4 tokens and EOS in a maximum length of 5: the only outputs are the phrases
    written one after the other, in either order; the best (by the model) is returned, with the
    model's own log-probabilities as its scores."""
    model = Bigram({9: STOP_EARLY})
    phrases = [[A, F_], [E_, E_]]
    [hyps] = beam_search(
        model,
        src(9),
        SearchOptions(beam=3, alpha=0.6, nbest=2, max_len_a=0, max_len_b=5),
        constraints=[phrases],
    )
    assert sorted(h.tokens for h in hyps) == [[A, F_, E_, E_], [E_, E_, A, F_]]
    tokens, score = best_meeting(STOP_EARLY, phrases, 5, 0.6)
    assert hyps[0].tokens == tokens and hyps[0].score == pytest.approx(score, abs=1e-5)
    assert hyps[0].score == pytest.approx(sum(logp_of(STOP_EARLY, tokens)) / length_penalty(5, 0.6), abs=1e-5)


@pytest.mark.parametrize("seed", range(6))
def test_every_output_meets_its_constraints(seed):
    """Random bigram models and constraints (1-3 phrases of 1-3 tokens, repeats allowed), beams
    1-4, both stopping rules, nbest: every returned hypothesis holds every phrase, its scores are
    the model's, and sentences searched in one batch get what each gets alone."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    tables = {s: torch.softmax(3 * torch.randn(W, W, generator=gen), dim=1) for s in range(4, 8)}
    firsts = [4, 5, 6, 7]
    cons = [
        [[rng.randrange(A, W) for _ in range(rng.randint(1, 3))] for _ in range(rng.randint(0, 3))]
        for _ in firsts
    ]
    for beam, stopping in itertools.product((1, 2, 4), ("exact", "fast")):
        alpha = 0.0 if beam == 1 else rng.choice([0.0, 0.6, 1.0])
        opts = SearchOptions(beam=beam, alpha=alpha, max_len_a=0, max_len_b=9, nbest=beam, stopping=stopping)
        batch = beam_search(Bigram(tables), src(*firsts), opts, constraints=cons)
        for first, phrases, hyps in zip(firsts, cons, batch):
            assert hyps, (beam, phrases)
            for h in hyps:
                assert meets(h.tokens, phrases), (beam, stopping, phrases, h.tokens)
                assert h.positional_scores == pytest.approx(logp_of(tables[first], h.tokens), abs=1e-5)
                assert h.score == pytest.approx(
                    h.log_prob / length_penalty(len(h.tokens) + 1, alpha), abs=1e-5
                )
            [alone] = beam_search(Bigram(tables), src(first), opts, constraints=[phrases])
            assert [h.tokens for h in alone] == [h.tokens for h in hyps]


def test_impossible_constraints_are_a_clear_error():
    model = Bigram({9: STOP_EARLY})
    with pytest.raises(
        ValueError,
        match=r"sentence 1: the constraints need 5 tokens and EOS, more than the "
        r"maximum output length 5",
    ):
        beam_search(
            model,
            src(9, 9),
            SearchOptions(beam=2, alpha=0.6, max_len_a=0, max_len_b=5),
            constraints=[[[A]], [[A, B_], [C_, D_, E_]]],
        )
    with pytest.raises(ValueError, match="may not hold PAD, BOS or EOS"):
        beam_search(model, src(9), SearchOptions(beam=2, alpha=0.6), constraints=[[[A, EOS]]])
    with pytest.raises(ValueError, match="phrase is empty"):
        beam_search(model, src(9), SearchOptions(beam=2, alpha=0.6), constraints=[[[]]])
    with pytest.raises(ValueError, match="not with a prefix"):
        beam_search(model, src(9), SearchOptions(beam=2, alpha=0.6), constraints=[[[A]]], prefix=[[B_]])
    # exactly fitting (4 tokens + EOS = 5) is fine
    [hyps] = beam_search(
        model,
        src(9),
        SearchOptions(beam=2, alpha=0.6, max_len_a=0, max_len_b=5),
        constraints=[[[A, B_], [C_, D_]]],
    )
    assert meets(hyps[0].tokens, [[A, B_], [C_, D_]]) and len(hyps[0].tokens) == 4


@pytest.mark.parametrize("width", [7, 64, 130, 200])
def test_row_argmax_is_argmax(width):
    """The first column of each row's maximum, as torch.argmax: with ties (rounded values), in the
    last W % 64 columns, and in rows of -inf."""
    gen = torch.Generator().manual_seed(width)
    x = (torch.randn(9, width, generator=gen) * 2).round()  # many ties
    x[3] = float("-inf")
    x[4, -1] = 50.0  # the maximum in the tail
    assert torch.equal(row_argmax(x), x.argmax(dim=1))


# ----------------------------------------------------------------------------- the real model
@pytest.fixture(scope="module")
def padded_sources():
    g = torch.Generator().manual_seed(1)
    rows = [torch.randint(4, 40, (n,), generator=g).tolist() + [EOS] for n in (2, 11, 5, 16, 8)]
    n = max(map(len, rows))
    return torch.tensor([r + [0] * (n - len(r)) for r in rows])  # (B, S)


def exact(hyps):
    """Everything a search returns, compared bit for bit."""
    return [[(h.tokens, h.score, h.positional_scores) for h in hs] for hs in hyps]


@pytest.mark.parametrize("beam, alpha, stopping", [(4, 0.6, "exact"), (3, 1.0, "fast"), (1, 0.0, "exact")])
def test_sentences_without_constraints_search_as_before(
    early_eos_model, padded_sources, beam, alpha, stopping
):
    """No phrases anywhere: the search without constraints, bit for bit. In a batch where other
    sentences have phrases (and hold them), a sentence without any gets the hypotheses of the
    search without constraints: bit for bit with a model whose rows are computed independently
    (the bigram model), the same tokens with the Transformer (whose float sums depend on the
    batch's rows in the last bits, as without constraints); beam 1 with alpha 0 (greedy search):
    the same tokens, the score summed in float32 rather than in Python."""
    opts = SearchOptions(beam=beam, alpha=alpha, max_len_b=6, nbest=beam, stopping=stopping)
    free = beam_search(early_eos_model, padded_sources, opts)
    assert exact(
        beam_search(early_eos_model, padded_sources, opts, constraints=[[] for _ in range(5)])
    ) == exact(free)
    mixed = [[], [[5], [7, 8]], [], [[10, 11, 12]], [[13], [13]]]
    out = beam_search(early_eos_model, padded_sources, opts, constraints=mixed)
    for i, phrases in enumerate(mixed):
        if phrases:
            assert all(meets(h.tokens, phrases) for h in out[i]) and out[i][0].tokens != free[i][0].tokens
        else:
            assert [h.tokens for h in out[i]] == [h.tokens for h in free[i]]
            assert [h.score for h in out[i]] == pytest.approx([h.score for h in free[i]], abs=1e-5)
    gen = torch.Generator().manual_seed(0)
    tables = {s: torch.softmax(3 * torch.randn(W, W, generator=gen), dim=1) for s in range(4, 9)}
    mixed = [[], [[A], [B_, C_]], [], [[D_, E_, F_]], [[A], [A]]]
    opts = opts.replace(max_len_a=0, max_len_b=8)
    free = beam_search(Bigram(tables), src(4, 5, 6, 7, 8), opts)
    out = beam_search(Bigram(tables), src(4, 5, 6, 7, 8), opts, constraints=mixed)
    if beam > 1:
        assert exact([out[0], out[2]]) == exact([free[0], free[2]])
    else:  # greedy search sums a hypothesis's log-probabilities in Python, the beam loop in float32
        assert [h.tokens for i in (0, 2) for h in out[i]] == [h.tokens for i in (0, 2) for h in free[i]]
        assert [h.score for i in (0, 2) for h in out[i]] == pytest.approx(
            [h.score for i in (0, 2) for h in free[i]]
        )
    assert all(meets(h.tokens, mixed[i]) for i in (1, 3, 4) for h in out[i])


# ----------------------------------------------------------------------------- API and CLI
LINES = ["der hund laeuft", "ein baum", "die katze springt auf den baum", ""]
PHRASES = [["rote katze"], ["blau", "unter dem haus"], [], []]


def test_translator_outputs_hold_the_phrases(tiny_checkpoint):
    """Each output holds its phrases as text (in any order, multi-word phrases whole); no
    constraints (None or all empty) gives the outputs of a plain translate."""
    from nmt.infer.translate import Translator

    t = Translator.load(tiny_checkpoint, device="cpu", precision="fp32")
    kw = dict(beam=3, max_len_a=0, max_len_b=12)
    plain = t.translate_sentences(LINES, **kw)
    out = t.translate_sentences(LINES, constraints=PHRASES, **kw)
    for line, phrases, text in zip(out, PHRASES, plain):
        assert all(p in line for p in phrases), (line, phrases)
    assert out[2:] == plain[2:] and out[3] == ""
    assert t.translate_sentences(LINES, constraints=[[] for _ in LINES], **kw) == plain
    nbest = t.translate_nbest(LINES[:2], constraints=PHRASES[:2], nbest=3, **kw)
    assert all(all(p in tr.text for p in phrases) for r, phrases in zip(nbest, PHRASES) for tr in r)


def test_translator_constraint_errors_name_the_line(tiny_checkpoint):
    from nmt.infer.translate import TranslateError, Translator

    t = Translator.load(tiny_checkpoint, device="cpu", precision="fp32")
    with pytest.raises(
        TranslateError,
        match=r"line 2: the constraints need \d+ tokens and EOS, more than the "
        r"maximum output length 4",
    ):
        t.translate_sentences(
            LINES[:2], constraints=[[], ["unter dem haus neben dem baum"]], max_len_a=0, max_len_b=4
        )
    with pytest.raises(
        TranslateError, match=r"line 1: constraint 'жук' holds characters the vocabulary does not have"
    ):
        t.translate_sentences(LINES[:1], constraints=[["жук"]])
    with pytest.raises(TranslateError, match="line 4: the sentence is empty"):
        t.translate_sentences(LINES, constraints=[[], [], [], ["haus"]])
    with pytest.raises(TranslateError, match="1 constraint lists for 2 sentences"):
        t.translate_sentences(LINES[:2], constraints=[["haus"]])
    with pytest.raises(TypeError, match="constraints of sentence 1: expected a list of str"):
        t.translate_sentences(LINES[:1], constraints=["haus"])
    from nmt.infer.translate import Sampling

    with pytest.raises(TranslateError, match="not with a prefix or sampling"):
        t.translate_sentences(LINES[:1], constraints=[["haus"]], sampling=Sampling())


def cli(*argv):
    from nmt.infer.command import add_translate_args, run_translate

    parser = argparse.ArgumentParser()
    add_translate_args(parser)
    return run_translate(parser.parse_args([str(a) for a in argv]), {})


def test_cli_constraints_file_tab_separated(tiny_checkpoint, tmp_path):
    """--constraints FILE: one line per input line, phrases separated by tabs, empty line: none;
    the outputs hold the phrases; a line count that differs, or a phrase that does not fit, is
    an error naming the file (and the line)."""
    from nmt.infer.translate import TranslateError

    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    (tmp_path / "c.txt").write_text("\n".join("\t".join(p) for p in PHRASES) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    fast = ("--beam", "3", "--max-len-a", "0", "--max-len-b", "12", "--quiet", "--precision", "fp32")
    assert (
        cli(tiny_checkpoint, "-i", tmp_path / "in.txt", "-o", out, "--constraints", tmp_path / "c.txt", *fast)
        == 0
    )
    result = out.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(result) == len(LINES)
    assert all(p in line for line, phrases in zip(result, PHRASES) for p in phrases)
    (tmp_path / "short.txt").write_text("haus\n", encoding="utf-8")
    with pytest.raises(TranslateError, match=r"short.txt: 1 constraint lines for 4 input lines"):
        cli(
            tiny_checkpoint,
            "-i",
            tmp_path / "in.txt",
            "-o",
            out,
            "--constraints",
            tmp_path / "short.txt",
            *fast,
        )
    (tmp_path / "long.txt").write_text(
        "\nhaus\tunter dem haus neben dem baum auf dem haus\n\n\n", encoding="utf-8"
    )
    with pytest.raises(TranslateError, match=r"long.txt: line 2: the constraints need"):
        cli(
            tiny_checkpoint,
            "-i",
            tmp_path / "in.txt",
            "-o",
            out,
            "--constraints",
            tmp_path / "long.txt",
            *fast,
        )
    with pytest.raises(TranslateError, match="--constraints: the torch engine's beam search"):
        cli(
            tiny_checkpoint,
            "-i",
            tmp_path / "in.txt",
            "-o",
            out,
            "--constraints",
            tmp_path / "c.txt",
            "--sampling",
            *fast,
        )


def test_http_constraints_field(tiny_checkpoint):
    """POST /translate with "constraints": a list of phrases for one text, one list per sentence
    for a list; the translations are the Translator's and hold the phrases; a wrong shape or a
    phrase the vocabulary cannot write is a 422 naming it, before anything is queued."""
    pytest.importorskip("fastapi", reason="nmt[serve] not installed")
    from fastapi.testclient import TestClient

    from nmt.infer.translate import Translator
    from nmt.serve.app import create_app
    from nmt.serve.command import add_serve_args, build_models

    parser = argparse.ArgumentParser()
    add_serve_args(parser)
    app = create_app(build_models({"tiny": tiny_checkpoint}, parser.parse_args([f"tiny={tiny_checkpoint}"])))
    want = Translator.load(tiny_checkpoint, device="cpu", precision="fp32").translate_sentences(
        LINES, constraints=PHRASES, beam=3
    )
    with TestClient(app) as c:
        r = c.post("/translate", json={"text": LINES, "constraints": PHRASES, "beam": 3})
        assert r.status_code == 200, r.text
        assert [t["text"] for t in r.json()["translations"]] == want
        r = c.post("/translate", json={"text": LINES[1], "constraints": PHRASES[1], "beam": 3})
        assert r.status_code == 200 and r.json()["translations"][0]["text"] == want[1]
        for body, message in (
            ({"text": LINES[:2], "constraints": [["haus"]]}, "one list of phrases per sentence"),
            ({"text": LINES[:2], "constraints": ["haus", "baum"]}, "one list of phrases per"),
            ({"text": LINES[0], "constraints": ["жук"]}, "constraints: line 1: constraint 'жук'"),
        ):
            r = c.post("/translate", json=body)
            assert r.status_code == 422 and message in r.json()["error"]["message"], r.text
