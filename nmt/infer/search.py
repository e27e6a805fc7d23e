"""Beam search and greedy search (section 6.1 of the paper), outside the model.

The model is only called through ``memory = model.encode(src)`` and
``logits, cache = model.decode_step(tokens, memory, cache)``; the memory and the cache are explicit
values with ``reorder(rows)``. ``beam_search`` is the algorithm; ``Beams`` (nmt.infer.beam_rows) holds
its rows and saves row copies, ``beam_topk`` (nmt.infer.topk) selects the best extensions.

Axis legend: B sentences still searching, k beam size, W vocabulary, t tokens generated so far.

Definitions (all pinned by tests/test_search.py):
  * |Y| counts the generated tokens *including* EOS (BOS is not counted).
  * lp(Y) = ((5 + |Y|) / 6) ** alpha, the GNMT length penalty (Wu et al., 2016); paper: alpha 0.6.
  * score(Y) = sum_i log p(y_i | y_<i, x) / lp(Y), the length-normalised log-probability.
  * max output length: |Y| <= floor(max_len_a * |x| + max_len_b) (paper: |x| + 50), where |x| is
    the number of source tokens (pieces + EOS, padding excluded); also |Y| <= model.cfg.max_positions.
    At the last allowed step only EOS may be chosen, so every hypothesis ends with EOS.
  * A step: every active hypothesis is extended by every token; the 2k best extensions by summed
    log-probability are taken. EOS extensions among the first k become finished hypotheses; the
    first k non-EOS extensions form the next active beam (finished ones never re-enter it).
  * Early termination: ``stopping="exact"`` (the paper's) stops a sentence once the output it
    returns can no longer change; ``"fast"`` (CTranslate2's) once the best extension is EOS or k
    hypotheses have finished (``still_searching`` gives both rules, and why the first is exact).
  * PAD and BOS are never generated: their log-probabilities are set to -inf before each choice
    (as fairseq does), so the scores of the other tokens are the model's own.
  * Prefix-constrained decoding (``prefix``): while t < len(prefix), every token other than
    prefix[t] gets log-probability -inf (prefix[t] keeps the model's); the search then goes on
    unconstrained. The prefix counts in |Y| and in the score; max length >= len(prefix) + 1.
  * Greedy search is beam=1 with alpha=0 (``greedy_search``). Allowed-token masks
    (``mask_disallowed``), lexical constraints (nmt.infer.constraints), sampling (``sample``) and
    ensembles (``Ensemble``) are defined where they are implemented.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from ..vocab import BOS, EOS, PAD
from .beam_rows import Beams, fill_from_end, reorder_owned
from .constraints import LexicalConstraints
from .options import (  # noqa: F401  (re-exported: the search's option checks live with the options)
    GREEDY,
    MAX_ALPHA,
    STOPPING,
    Sampling,
    SearchOptions,
    check_lengths,
    check_sampling_range,
    check_search_range,
    default_alpha,
)
from .topk import Candidates, beam_topk, row_topk


def right_to_left(model) -> bool:
    """Whether ``model`` writes its output last piece first (ModelConfig.right_to_left); a model
    (or stand-in) without that setting writes left to right."""
    return bool(getattr(getattr(model, "cfg", None), "right_to_left", False))


def reading_order(model, tokens: list[int]) -> list[int]:
    """Ids of ``model``'s output in reading order, or ids in reading order in ``model``'s order
    (the same map both ways: a right-to-left model's sequence reversed)."""
    return tokens[::-1] if right_to_left(model) else list(tokens)


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty lp = ((5 + length) / 6) ** alpha; length counts EOS."""
    return ((5.0 + length) / 6.0) ** alpha


def max_score_bound(logp_sum: float, length: int, max_len: int, alpha: float) -> float:
    """Upper bound on the final score of an active hypothesis with summed log-probability
    ``logp_sum`` (<= 0) after ``length`` generated tokens, if it ends within ``max_len`` tokens."""
    best_lp = max(length_penalty(length + 1, alpha), length_penalty(max_len, alpha))
    return logp_sum / best_lp


@dataclass
class Hypothesis:
    """A finished output: ``tokens`` without BOS/EOS, ``positional_scores`` one log-probability per
    generated token including the final EOS, ``score`` = sum(positional_scores) / lp(len + 1)."""

    tokens: list[int]
    score: float
    positional_scores: list[float] = field(default_factory=list)

    @property
    def log_prob(self) -> float:
        return sum(self.positional_scores)


def _add_finished(finished: list[Hypothesis], hyp: Hypothesis, k: int) -> None:
    """Insert keeping the k best, best first (on ties, the earlier-found hypothesis stays ahead)."""
    i = len(finished)
    while i > 0 and finished[i - 1].score < hyp.score:
        i -= 1
    finished.insert(i, hyp)
    del finished[k:]


def output_lengths(
    model, src_tokens: Tensor, options: SearchOptions, *, prefix: list[list[int]] | None
) -> list[int]:
    """The max output length |Y| of each sentence (SearchOptions.max_len), at least a prefix's
    length + 1; ValueError for a prefix holding PAD, BOS or EOS, or leaving no room for EOS."""
    src_len = src_tokens.ne(PAD).sum(dim=1).tolist()  # |x| per sentence
    limit = model.cfg.max_positions
    max_len = [options.max_len(n, limit) for n in src_len]
    if prefix is not None:
        if len(prefix) != len(max_len):
            raise ValueError(f"{len(prefix)} prefixes for {len(max_len)} sentences")
        for i, pre in enumerate(prefix):
            if set(pre) & {PAD, BOS, EOS}:
                raise ValueError(f"sentence {i}: a prefix may not hold PAD, BOS or EOS ({pre})")
            if len(pre) + 1 > limit:
                raise ValueError(
                    f"sentence {i}: a prefix of {len(pre)} tokens leaves no room for EOS "
                    f"(model.max_positions={limit})"
                )
            max_len[i] = max(max_len[i], len(pre) + 1)
    return max_len


@dataclass(frozen=True, kw_only=True)
class Rules:
    """What every step of a search checks (see the module docstring): per sentence its max output
    length |Y| (``max_len``), EOS not before ``min_len``, the ``prefix`` tokens it must start with;
    for beam search also the beam size ``k``, how many hypotheses it returns (``nbest``), the length
    penalty ``alpha`` and the ``stopping`` rule (greedy search and sampling: one row, no penalty);
    ``no_repeat_ngram`` n > 0: no row repeats one of its n-grams (``block_repeats``)."""

    max_len: list[int]
    min_len: int = 1
    prefix: list[list[int]] | None = None
    k: int = 1
    nbest: int = 1
    alpha: float = 0.0
    stopping: str = "exact"
    no_repeat_ngram: int = 0

    @classmethod
    def of(cls, options: SearchOptions, max_len: list[int], prefix: list[list[int]] | None, *, beam: bool):
        """The rules of a search with ``options``: beam search (``beam``: k, nbest, alpha and the
        stopping rule of ``options``) or one row per sentence (sampling: no length penalty)."""
        if not beam:
            return cls(
                max_len=max_len,
                min_len=options.min_len,
                prefix=prefix,
                no_repeat_ngram=options.no_repeat_ngram,
            )
        return cls(
            max_len=max_len,
            min_len=options.min_len,
            prefix=prefix,
            k=options.beam,
            nbest=options.nbest,
            alpha=options.penalty,
            stopping=options.stopping_rule(),
            no_repeat_ngram=options.no_repeat_ngram,
        )


def mask_step(logp: Tensor, t: int, alive: list[int], rules: Rules) -> Tensor:
    """The log-probabilities (N, W) of step t (making token t+1) with the choices the ``rules``
    forbid set to -inf: PAD and BOS always; all but EOS at a sentence's last allowed step; EOS
    before ``min_len``; all but prefix[t] while the prefix lasts. ``alive[i]``: the sentence of rows
    i*k..(i+1)*k-1."""
    neg_inf = float("-inf")
    logp[:, PAD] = neg_inf
    logp[:, BOS] = neg_inf
    k, device, prefix = rules.k, logp.device, rules.prefix
    last = [t + 1 >= rules.max_len[s] for s in alive]  # (B,) this step is the last allowed
    block_eos = t + 1 < rules.min_len
    if any(last) or block_eos:  # only EOS at the last allowed step; no EOS before min_len
        last_rows = torch.tensor(last, device=device).repeat_interleave(k)[:, None]  # (N, 1)
        eos_col = torch.arange(logp.size(-1), device=device) == EOS  # (W,)
        mask = (last_rows & ~eos_col) | (~last_rows & eos_col & block_eos)  # (N, W)
        logp = logp.masked_fill(mask, neg_inf)
    if prefix is not None and any(t < len(prefix[s]) for s in alive):
        forced = torch.tensor(
            [prefix[s][t] if t < len(prefix[s]) else -1 for s in alive], device=device
        ).repeat_interleave(k)  # (N,) forced token, -1: free
        col = forced.clamp(min=0)[:, None]  # (N, 1)
        only = torch.full_like(logp, neg_inf).scatter_(1, col, logp.gather(1, col))  # (N, W)
        logp = torch.where(forced.ge(0)[:, None], only, logp)
    return logp


def block_repeats(logp: Tensor, tokens: Tensor, t: int, alive: list[int], rules: Rules) -> Tensor:
    """The log-probabilities (N, W) of step t with -inf for every token that would complete an
    n-gram (n = rules.no_repeat_ngram) already in its row's output ``tokens`` (N, 1+t) (BOS first),
    as fairseq's --no-repeat-ngram-size; EOS is never blocked (every row can end), nor a token a
    prefix forces. Rows i*k..(i+1)*k-1 search sentence ``alive[i]``."""
    n = rules.no_repeat_ngram
    if n <= 0 or t + 1 < n:  # fewer than n - 1 tokens written: no n-gram to complete
        return logp
    k, prefix = rules.k, rules.prefix
    rows = tokens[:, 1:].tolist()  # (N, t) the output so far, BOS dropped
    banned_rows, banned_tokens = [], []
    for r, out in enumerate(rows):
        if prefix is not None and t < len(prefix[alive[r // k]]):
            continue  # the prefix decides this step
        tail = out[len(out) - (n - 1) :] if n > 1 else []
        for i in range(len(out) - n + 1):
            if out[i : i + n - 1] == tail and out[i + n - 1] != EOS:
                banned_rows.append(r)
                banned_tokens.append(out[i + n - 1])
    if banned_rows:
        logp = logp.index_put(
            (torch.tensor(banned_rows, device=logp.device), torch.tensor(banned_tokens, device=logp.device)),
            torch.tensor(float("-inf"), device=logp.device, dtype=logp.dtype),
        )
    return logp


# ----------------------------------------------------------------------------- beam search
@torch.inference_mode()  # no autograd bookkeeping at all
def beam_search(
    model,
    src_tokens: Tensor,
    options: SearchOptions = SearchOptions(),
    *,
    prefix: list[list[int]] | None = None,
    allowed_tokens=None,
    constraints: list[list[list[int]]] | None = None,
) -> list[list[Hypothesis]]:
    """Search each sentence of ``src_tokens`` (B, S) (padded with PAD) with ``options`` (beam k,
    length penalty, nbest, length limits, stopping rule, n-gram block; sampling is ``sample``'s);
    returns, per sentence, its ``nbest`` (<= k) best finished hypotheses, best first. ``min_len``
    masks EOS until |Y| >= min_len (min_len = max length forces a fixed output length, for
    benchmarks). ``prefix[i]`` (target ids, no BOS/EOS): tokens every output of sentence i starts
    with. ``allowed_tokens``: a function of ``src_tokens`` giving each step's token mask, see
    ``mask_disallowed`` (None: every token but PAD and BOS allowed). ``constraints[i]``: target
    phrases (lists of ids) output i must contain, searched with dynamic beam allocation
    (nmt.infer.constraints; not with ``prefix`` or ``allowed_tokens``)."""
    k, n_src, device = options.beam, src_tokens.size(0), src_tokens.device
    max_len = output_lengths(model, src_tokens, options, prefix=prefix)
    rules = Rules.of(options, max_len, prefix, beam=True)
    alpha = rules.alpha
    memory = model.encode(src_tokens)
    allowed = None if allowed_tokens is None else allowed_tokens(src_tokens)
    lexical = lexical_constraints(constraints, rules, device=device, others=allowed_tokens is not None)
    if k == 1 and alpha == 0 and lexical is None:  # greedy: the same choices without the bookkeeping
        return _greedy(model, memory, n_src, rules, device=device, allowed=allowed)
    beams = Beams.start(memory, n_src, k, device=device, lexical=lexical)  # BOS, score 0: one per sentence
    finished: list[list[Hypothesis]] = [[] for _ in range(n_src)]
    for t in range(max(max_len)):  # t tokens generated so far; this step makes token t+1
        logp = beams.log_probs(model)  # (B*k, W) log p(next token) of every active hypothesis
        logp = mask_step(logp, t, beams.alive, rules)  # forbidden choices -inf
        logp = block_repeats(logp, beams.tokens, t, beams.alive, rules)  # (B*k, W)
        logp = mask_disallowed(logp, t, beams, rules, allowed)  # (B*k, W)
        # the 2k best extensions per sentence: summed log-prob, row in beam, token, its log-prob
        top = beam_topk(logp, beams.scores, min(2 * k, k * logp.size(-1)))  # (B, 2k) each
        if lexical is not None:  # the 2k candidates by dynamic beam allocation (Post & Vilar 2018)
            top = Candidates(*lexical.allocate(logp, beams.scores, *top))  # (B, 2k) each
        is_eos = top.token.eq(EOS)  # (B, 2k)
        # EOS extensions among the first k finish; the first k others form the next active beam
        add_eos_extensions(finished, beams, top, is_eos, lp=length_penalty(t + 1, alpha))
        sel = next_beam(is_eos, k)  # (B, k) ranks among the 2k
        scores = top.scores.gather(1, sel)  # (B, k) the next active beam's summed log-probabilities
        going = still_searching(finished, beams.alive, scores, is_eos, t, rules)
        if not going:
            break
        beams.advance(top, sel, scores, going)
    return [f[: options.nbest] for f in finished]


def lexical_constraints(
    constraints: list[list[list[int]]] | None, rules: Rules, *, device: torch.device, others: bool
) -> LexicalConstraints | None:
    """The LexicalConstraints of beam_search's ``constraints`` (None when there are none);
    ValueError with a prefix or ``others`` (an ``allowed_tokens`` function)."""
    if constraints is None or not any(constraints):
        return None
    if others or rules.prefix is not None:
        raise ValueError("constraints: not with a prefix or an allowed_tokens function")
    return LexicalConstraints(constraints, beam=rules.k, max_len=rules.max_len, device=device)


def mask_disallowed(logp: Tensor, t: int, beams: "Beams", rules: Rules, allowed) -> Tensor:
    """The log-probabilities (B*k, W) of step t with what ``allowed`` and the lexical constraints
    forbid set to -inf.

    ``allowed`` (made by beam_search's ``allowed_tokens(src_tokens)``, e.g. the parser's well-formed
    trees, nmt.experiments.well_formed.WellFormedTrees) is a function ``mask(logp, tokens, alive, k,
    steps_left)`` that sets the log-probabilities of the tokens a hypothesis may not take next to
    -inf, given its tokens so far (BOS first) and how many tokens it may still write, EOS included
    (rows ``i*k..(i+1)*k-1`` search sentence ``alive[i]``); the others keep the model's.
    Lexical constraints (``beams.lexical``): EOS only once every phrase is met, room kept for the
    phrases left (nmt.infer.constraints)."""
    k = beams.k
    if allowed is not None:
        steps_left = torch.tensor([rules.max_len[s] - t for s in beams.alive], device=logp.device)  # (B,)
        steps_left = steps_left.repeat_interleave(k)  # (B*k,)
        logp = allowed(logp, beams.tokens, beams.alive, k, steps_left)  # (B*k, W)
    if beams.lexical is not None:
        logp = beams.lexical.mask(logp, t=t, alive=beams.alive)  # (B*k, W)
    return logp


def add_eos_extensions(
    finished: list[list[Hypothesis]], beams: "Beams", top: Candidates, is_eos: Tensor, *, lp: float
) -> None:
    """The EOS extensions (``is_eos`` (B, 2k)) ranked among the first k candidates ``top``, unless
    impossible (-inf), become finished hypotheses of their sentences (score: summed log-probability
    / ``lp``); each sentence keeps its k best."""
    k = beams.k
    fin = (is_eos[:, :k] & top.scores[:, :k].gt(float("-inf"))).nonzero()  # (F, 2) sentence, rank
    if not fin.numel():
        return
    fin_rows = top.beam[fin[:, 0], fin[:, 1]] + fin[:, 0] * k  # (F,) row in B*k
    fin_tokens = beams.tokens[fin_rows, 1:].tolist()
    fin_logp = top.logp[fin[:, 0], fin[:, 1], None]  # (F, 1) log p(EOS)
    fin_positional = torch.cat([beams.pos_scores[fin_rows], fin_logp], dim=1).tolist()
    fin_total = top.scores[fin[:, 0], fin[:, 1]].tolist()
    for (i, _), toks, positional, total in zip(fin.tolist(), fin_tokens, fin_positional, fin_total):
        _add_finished(finished[beams.alive[i]], Hypothesis(toks, total / lp, positional), k)


def next_beam(is_eos: Tensor, k: int) -> Tensor:
    """The next active beam: the first k non-EOS extensions of the 2k candidates (``is_eos``
    (B, 2k), in rank order), as their ranks (B, k), best first."""
    n = is_eos.size(1)
    rank = torch.arange(n, device=is_eos.device).expand_as(is_eos)  # (B, 2k)
    return rank.masked_fill(is_eos, n * 2).sort(dim=1).indices[:, :k]  # (B, k) stable order by rank


def still_searching(
    finished: list[list[Hypothesis]], alive: list[int], scores: Tensor, is_eos: Tensor, t: int, rules: Rules
) -> list[int]:
    """The positions i (ascending) of the sentences ``alive[i]`` that search on after step t (which
    made token t+1), given the next active beam's summed log-probabilities ``scores`` (B, k) and the
    step's candidates ``is_eos`` (B, 2k). A sentence stops at its max length, when it has no active
    hypothesis left, or, once it has ``nbest`` finished hypotheses, by the ``stopping`` rule:

    exact (the paper's): when no active hypothesis can still beat the nbest-th best finished one,
    i.e. when the output it returns can no longer change. An active hypothesis with summed
    log-probability s <= 0 after n tokens can only end with s' <= s and a length L in
    [n+1, L_max], so its final score is at most s / max_{n+1 <= L <= L_max} lp(L), i.e.
    s / lp(L_max) for alpha >= 0 (s / lp(n+1) for alpha < 0: ``max_score_bound``); every later
    hypothesis extends an active one. The sentence stops when that bound for its best active
    hypothesis is <= the nbest-th best finished score (a later hypothesis scoring the same ranks
    after it). The returned hypotheses are those of a search run on to L_max; waiting for k
    finished ones (the k-th best as the bar) would return the same with more steps when nbest < k.

    fast (not the paper's): as soon as the best extension of a step is EOS or k hypotheses have
    finished, as CTranslate2 does (patience 1; fairseq stops at k finished). It runs fewer steps
    and can miss a longer output that the exact rule would have found."""
    max_len, nbest, k, alpha, stopping = rules.max_len, rules.nbest, rules.k, rules.alpha, rules.stopping
    best_active = scores.max(dim=1).values.tolist()  # (B,)
    top_eos = is_eos[:, 0].tolist() if stopping == "fast" else None  # (B,) best extension is EOS
    going = []
    for i, s in enumerate(alive):
        done = t + 1 >= max_len[s] or best_active[i] == float("-inf")
        if not done and stopping == "fast" and len(finished[s]) >= nbest:
            done = top_eos[i] or len(finished[s]) >= k
        elif not done and stopping == "exact" and len(finished[s]) >= nbest:
            bound = max_score_bound(best_active[i], t + 1, max_len[s], alpha)
            done = bound <= finished[s][nbest - 1].score
        if not done:
            going.append(i)
    return going


# ----------------------------------------------------------------------------- greedy search, sampling
def _greedy(
    model, memory, n_src: int, rules: Rules, *, device: torch.device, allowed
) -> list[list[Hypothesis]]:
    """beam_search with k=1, alpha=0: each step takes the most probable allowed token; a sentence
    ends with EOS, or without output where every token is forbidden. With one hypothesis and no
    length penalty, the exact rule stops exactly there (a finished hypothesis scores no lower than
    any extension of the other choices)."""
    alive = list(range(n_src))
    tokens = torch.full((n_src, 1), BOS, dtype=torch.long, device=device)  # (B, 1+t)
    pos_scores = torch.zeros(n_src, 0, device=device)  # (B, t)
    finished: list[list[Hypothesis]] = [[] for _ in range(n_src)]
    cache = None
    for t in range(max(rules.max_len)):
        logits, cache = model.decode_step(tokens[:, -1:], memory, cache)
        logp = mask_step(F.log_softmax(logits[:, -1].float(), dim=-1), t, alive, rules)  # (B, W)
        logp = block_repeats(logp, tokens, t, alive, rules)  # (B, W)
        if allowed is not None:
            steps_left = torch.tensor([rules.max_len[s] - t for s in alive], device=device)  # (B,)
            logp = allowed(logp, tokens, alive, 1, steps_left)
        new_logp, new_tok = row_topk(logp, 1)  # (B, 1) each
        ended = (new_tok.squeeze(1).eq(EOS) | new_logp.squeeze(1).isneginf()).tolist()  # (B,)
        done, state = _extend_single(tokens, pos_scores, memory, cache, alive, new_tok, new_logp, ended)
        for s, hyp in done:
            finished[s].append(hyp)
        if state is None:
            break
        tokens, pos_scores, memory, cache, alive = state
    return finished


def _extend_single(
    tokens: Tensor,
    pos_scores: Tensor,
    memory,
    cache,
    alive: list[int],
    new_tok: Tensor,
    new_logp: Tensor,
    ended: list[bool],
):
    """One hypothesis per sentence (greedy, sampling): append the chosen tokens ``new_tok`` (B, 1)
    and their log-probabilities ``new_logp`` (B, 1); rows with ``ended`` stop, and become a
    finished (sentence, Hypothesis) unless their last choice was impossible (-inf: every token
    forbidden). Returns those and the state (tokens, pos_scores, memory, cache, alive) of the rows
    that go on, or None when none does."""
    tokens = torch.cat([tokens, new_tok], dim=1)  # (B, 2+t)
    pos_scores = torch.cat([pos_scores, new_logp], dim=1)  # (B, 1+t)
    done = []
    for i in (i for i, e in enumerate(ended) if e):
        positional = pos_scores[i].tolist()
        if positional[-1] != float("-inf"):
            done.append((alive[i], Hypothesis(tokens[i, 1:-1].tolist(), sum(positional), positional)))
    keep = [i for i, e in enumerate(ended) if not e]
    if not keep:
        return done, None
    if len(keep) < len(alive):
        keep = fill_from_end(keep, len(alive))  # the last rows move into the gaps
        rows = torch.tensor(keep, device=tokens.device)
        tokens, pos_scores = tokens[rows], pos_scores[rows]
        memory, cache = reorder_owned(memory, rows), reorder_owned(cache, rows)
        alive = [alive[i] for i in keep]
    return done, (tokens, pos_scores, memory, cache, alive)


def greedy_search(model, src_tokens: Tensor, options: SearchOptions = GREEDY) -> list[Hypothesis]:
    """Greedy search: beam_search with beam=1, alpha=0 (argmax each step until EOS) and the length
    limits, min_len and n-gram block of ``options``. With beam=1 and alpha>0, beam_search keeps
    extending past a finished hypothesis while a longer output could still score higher."""
    hyps = beam_search(model, src_tokens, options.replace(beam=1, alpha=0.0, nbest=1))
    return [h[0] for h in hyps]


def sentence_rng(seed: int, index: int) -> random.Random:
    """The random stream of sentence ``index`` under ``seed`` (independent of batching)."""
    return random.Random(f"nmt-sample:{seed}:{index}")


def filter_probs(probs: Tensor, *, topk: int = 0, topp: float = 1.0) -> Tensor:
    """probs (N, W) with all but the ``topk`` most probable tokens (0: all; ties with the k-th
    stay) and all but the smallest most-probable set reaching probability ``topp`` (nucleus,
    Holtzman et al. 2020) set to 0; not renormalised."""
    if 0 < topk < probs.size(-1):
        kth = probs.topk(topk, dim=-1).values[:, -1:]  # (N, 1) the k-th largest
        probs = probs.masked_fill(probs < kth, 0.0)
    if topp < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True, stable=True)  # (N, W), ties: lower id first
        total = sorted_p.sum(dim=-1, keepdim=True)  # (N, 1)
        before = sorted_p.cumsum(dim=-1) - sorted_p  # (N, W) mass of the more probable tokens
        drop = before >= topp * total  # the set already reached topp without this token
        probs = probs.scatter(1, order, sorted_p.masked_fill(drop, 0.0))
    return probs


@torch.inference_mode()
def sample(
    model,
    src_tokens: Tensor,
    options: SearchOptions,
    *,
    rngs: list[random.Random],
    prefix: list[list[int]] | None = None,
) -> list[Hypothesis]:
    """One sampled output per sentence of ``src_tokens`` (B, S), each token drawn from
    softmax(logits / T) restricted to the ``topk`` most probable tokens and to the smallest set whose
    probability reaches ``topp`` (T=1, no restriction: the full distribution, as Edunov et al. 2018
    for back-translation). Sentence i draws with ``rngs[i]`` (see ``sentence_rng``: its own
    generator seeded by (seed, i), so the output does not depend on batching) by inverting the
    cumulative distribution. Length limits, PAD/BOS and ``prefix`` as in beam_search; ``score`` is
    the model's log-probability (T=1) of the output. The sampling parameters are
    ``options.sampling``'s (default Sampling(): T=1, no restriction); ``no_repeat_ngram`` applies."""
    s = options.sampling or Sampling()
    temperature, topk, topp = s.temperature, s.topk, s.topp
    n_src, device = src_tokens.size(0), src_tokens.device
    max_len = output_lengths(model, src_tokens, options, prefix=prefix)
    rules = Rules.of(options, max_len, prefix, beam=False)
    memory = model.encode(src_tokens)
    alive = list(range(n_src))
    tokens = torch.full((n_src, 1), BOS, dtype=torch.long, device=device)  # (B, 1+t)
    pos_scores = torch.zeros(n_src, 0, device=device)  # (B, t)
    out: list[Hypothesis | None] = [None] * n_src
    cache = None
    for t in range(max(max_len)):
        logits, cache = model.decode_step(tokens[:, -1:], memory, cache)
        logp = mask_step(F.log_softmax(logits[:, -1].float(), dim=-1), t, alive, rules)  # (B, W)
        logp = block_repeats(logp, tokens, t, alive, rules)  # (B, W)
        probs = F.softmax(logp / temperature, dim=-1)  # (B, W) = softmax(logits / T) where allowed
        lost = probs.isnan().any(dim=-1)  # (B,) T so small that every logp / T overflowed to -inf
        if lost.any():  # its limit T -> 0: the most probable allowed token
            probs[lost] = F.one_hot(logp[lost].argmax(dim=-1), logp.size(-1)).to(probs.dtype)
        probs = filter_probs(probs, topk=topk, topp=topp)
        cdf = probs.cumsum(dim=-1)  # (B, W)
        u = torch.tensor([1.0 - rngs[s].random() for s in alive], device=device)  # (B,) in (0, 1]
        new_tok = (cdf < (u * cdf[:, -1])[:, None]).sum(dim=-1).clamp(max=cdf.size(-1) - 1)  # (B,)
        new_logp = logp.gather(1, new_tok[:, None])  # (B, 1)
        done, state = _extend_single(
            tokens, pos_scores, memory, cache, alive, new_tok[:, None], new_logp, new_tok.eq(EOS).tolist()
        )
        for s, hyp in done:
            out[s] = hyp
        if state is None:
            break
        tokens, pos_scores, memory, cache, alive = state
    return out


# ----------------------------------------------------------------------------- model wrappers
class Ensemble:
    """Several models searched as one: per step, the mean of their log-probabilities (a log-linear
    combination, renormalised by the search's log_softmax, as Marian does). They must share the
    target vocabulary; the caller checks that it is the same vocabulary (translate.Translator
    compares the SentencePiece models)."""

    @dataclass
    class Cfg:
        max_positions: int
        tgt_vocab_size: int
        right_to_left: bool = False
        src_vocab_size: int | None = None  # the members' (one SentencePiece model: one size)

    @dataclass
    class State:
        parts: list  # one memory or cache per model

        def reorder(self, indices: Tensor) -> "Ensemble.State":
            return Ensemble.State([p.reorder(indices) for p in self.parts])

        def reorder_(self, indices: Tensor) -> "Ensemble.State":
            return Ensemble.State([reorder_owned(p, indices) for p in self.parts])

    def __init__(self, models: list):
        if not models:
            raise ValueError("an ensemble needs at least one model")
        sizes = {m.cfg.tgt_vocab_size for m in models}
        if len(sizes) > 1:
            raise ValueError(f"ensemble models have different target vocabulary sizes {sorted(sizes)}")
        directions = {right_to_left(m) for m in models}
        if len(directions) > 1:
            raise ValueError(
                "an ensemble's models must write the target in one direction: some are "
                "right-to-left (model.right_to_left); rescore with them instead (--rerank)"
            )
        self.models = models
        self.cfg = Ensemble.Cfg(
            min(m.cfg.max_positions for m in models),
            sizes.pop(),
            directions.pop(),
            src_vocab_size=getattr(models[0].cfg, "src_vocab_size", None),
        )

    def encode(self, src_tokens: Tensor) -> "Ensemble.State":
        return Ensemble.State([m.encode(src_tokens) for m in self.models])

    def decode_step(
        self, tgt_tokens: Tensor, memory: "Ensemble.State", cache: "Ensemble.State | None" = None
    ):
        """-> mean over models of log_softmax(logits) (N, T, W), the models' new caches."""
        logps, caches = [], []
        for i, m in enumerate(self.models):
            logits, c = m.decode_step(tgt_tokens, memory.parts[i], None if cache is None else cache.parts[i])
            logps.append(F.log_softmax(logits.float(), dim=-1))
            caches.append(c)
        return torch.stack(logps).mean(dim=0), Ensemble.State(caches)


class RecomputePrefix:
    """A model wrapper whose ``decode_step`` re-runs the whole target prefix from scratch each step
    (no reuse of keys/values): the naive decoder, for tests and the speed benchmark."""

    @dataclass
    class Cache:
        prefix: Tensor  # (B, t) every target token fed so far

        def reorder(self, indices: Tensor) -> "RecomputePrefix.Cache":
            return RecomputePrefix.Cache(self.prefix.index_select(0, indices))

    def __init__(self, model):
        self.model, self.cfg = model, model.cfg

    def encode(self, src_tokens: Tensor):
        return self.model.encode(src_tokens)

    def decode_step(self, tgt_tokens: Tensor, memory, cache: "RecomputePrefix.Cache | None"):
        prefix = tgt_tokens if cache is None else torch.cat([cache.prefix, tgt_tokens], dim=1)  # (B, t)
        logits, _ = self.model.decode_step(prefix, memory, None)  # (B, t, W)
        return logits[:, -tgt_tokens.size(1) :], RecomputePrefix.Cache(prefix)
