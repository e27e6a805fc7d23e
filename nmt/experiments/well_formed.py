"""The well-formed search of `nmt parse --well-formed` (not the paper's): beam search's
``allowed_tokens`` masks (nmt.infer.search) that let a parser write only well-formed linearised
trees with one leaf per input word, for the bracket form (``WellFormedTrees``) and the per-word
form (``WellFormedPerWord``) of nmt.experiments.parsing.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..vocab import BOS, EOS, PAD, UNK
from .trees import is_bracket, split_per_word


class WellFormedTrees:
    """Beam search's ``allowed_tokens`` (nmt.infer.search) for parsing: only well-formed linearised
    trees with exactly one leaf per input word. Given a hypothesis's tokens so far (depth d = open
    minus closed brackets, n leaves written, m input words, previous token p):
      - an opening bracket: first token, or 0 < d and n < m (every constituent needs a word, and
        nothing follows the root); and only if the tree can still be finished within the maximum
        output length (the bracket, its close, the m - n words, d closes and EOS), and, where given,
        if it makes no more than ``max_open_run`` opening brackets in a row and a depth of at most
        ``max_depth`` (`nmt prepare ptb` records both for its training trees: without them a model
        that does not expect the next word can put off writing it with endless unary chains);
      - a closing bracket: the one of the innermost open constituent (same label), if p is not an
        opening bracket (no empty constituent) and, when it closes the root (d = 1), n = m;
      - a leaf: 0 < d and n < m; with ``leaves`` None (a ``--leaves words`` model) only the next
        input word's id (<unk> for a word that looks like a bracket), otherwise any of ``leaves``
        (XX, or the POS tags);
      - EOS: d = 0 after the root, n = m.
    Not the paper's (its outputs were unconstrained and repaired). Source tokens are the words'
    ids followed by EOS and padding, as `nmt parse` feeds them."""

    def __init__(
        self,
        pieces: list[str],
        *,
        leaves: frozenset[str] | set[str] | None,
        max_open_run: int | None = None,
        max_depth: int | None = None,
    ):
        tokens = [p.lstrip("\u2581") for p in pieces]
        special = torch.zeros(len(pieces), dtype=torch.bool)
        special[[PAD, BOS, EOS]] = True
        self.is_open = torch.tensor([is_bracket(t) and t[0] == "(" for t in tokens])  # (W,)
        self.is_close = torch.tensor([is_bracket(t) and t[0] == ")" for t in tokens])  # (W,)
        if leaves is None:
            self.is_leaf = ~(self.is_open | self.is_close | special)  # words and <unk>
        else:
            self.is_leaf = torch.tensor([t in leaves for t in tokens]) & ~special
        self.depth_step = self.is_open.long() - self.is_close.long()  # (W,) +1 open, -1 close
        ids = {t: i for i, t in enumerate(tokens)}
        # (W,) the id of the bracket closing each opening one ("(NP" -> ")NP"); -1: none in the vocabulary
        self.closer = torch.tensor(
            [ids.get(")" + t[1:], -1) if o else -1 for t, o in zip(tokens, self.is_open.tolist())]
        )
        self.copy_words = leaves is None
        self.max_open_run, self.max_depth = max_open_run, max_depth

    def __call__(self, src_tokens: Tensor):
        device = src_tokens.device
        is_open, is_close, is_leaf, depth_step, closer = (
            x.to(device) for x in (self.is_open, self.is_close, self.is_leaf, self.depth_step, self.closer)
        )
        real = src_tokens.ne(PAD) & src_tokens.ne(EOS)  # (B, S) the words
        n_words = real.sum(1)  # (B,)
        words = src_tokens.masked_fill(is_open[src_tokens] | is_close[src_tokens], UNK)  # (B, S)

        def mask(logp: Tensor, tokens: Tensor, alive: list[int], k: int, steps_left: Tensor) -> Tensor:
            # logp (N, W), tokens (N, 1+t) with BOS first, steps_left (N,); N = len(alive) * k rows
            sent = torch.tensor(alive, device=device).repeat_interleave(k)  # (N,) sentence of each row
            opened = is_open[tokens]  # (N, 1+t) which tokens are opening brackets
            level = depth_step[tokens].cumsum(1)  # (N, 1+t) depth after each token
            depth = level[:, -1]  # (N,)
            n_leaves = is_leaf[tokens].sum(1)  # (N,)
            words_left = n_leaves < n_words[sent]  # (N,)
            room = steps_left - (n_words[sent] - n_leaves) - depth - 1  # (N,) steps to spare
            started = tokens.size(1) > 1
            inside = depth > 0  # (N,)
            after_open = opened[:, -1]  # (N,)
            may_open = (words_left & inside if started else torch.ones_like(inside)) & room.ge(2)  # (N,)
            if self.max_depth is not None:
                may_open &= depth.lt(self.max_depth)
            if self.max_open_run is not None:  # opening brackets at the end of the tokens so far
                other = ~opened * torch.arange(1, tokens.size(1) + 1, device=device)  # (N, 1+t)
                may_open &= (tokens.size(1) - other.max(1).values).lt(self.max_open_run)
            may_close = inside & ~after_open & (depth.gt(1) | ~words_left)  # (N,)
            may_leaf = words_left & inside  # (N,)
            may_end = ~words_left & ~inside & started  # (N,)
            # the innermost open constituent: the last opening bracket that left the depth at `depth`
            innermost = opened & level.eq(depth[:, None])  # (N, 1+t)
            where = (innermost * torch.arange(1, tokens.size(1) + 1, device=device)).argmax(1)  # (N,)
            close_id = closer[tokens.gather(1, where[:, None]).squeeze(1)]  # (N,) -1: any closing bracket
            rows = torch.arange(len(tokens), device=device)  # (N,)
            allowed = (may_open[:, None] & is_open) | (
                (may_close & close_id.lt(0))[:, None] & is_close
            )  # (N, W)
            allowed[rows, close_id.clamp(min=0)] |= may_close & close_id.ge(0)
            if self.copy_words:
                nxt = words[sent, n_leaves.clamp(max=words.size(1) - 1)]  # (N,) the next input word
                allowed[rows, nxt] |= may_leaf
            else:
                allowed |= may_leaf[:, None] & is_leaf
            allowed[:, EOS] = may_end
            return logp.masked_fill(~allowed, float("-inf"))

        return mask


class WellFormedPerWord:
    """Beam search's ``allowed_tokens`` for a ``--form per-word`` model: exactly one per-word token for
    each input word, then EOS, and only well-formed trees. With d the depth before the token
    (open minus closed brackets), o its opening and c its closing brackets, n words labelled of m:
    a token needs d + o >= 1 (the word sits inside a constituent), d + o - c >= 1 before the last
    word (the root stays open: one tree) and d + o - c = 0 at the last; d + o <= ``max_depth``
    where given; and the words left must be able to close the tree with the tokens the vocabulary
    has (a table of which (words left, depth) can still finish, so no hypothesis runs into a dead
    end); EOS only when n = m. No constituent is empty by construction (each opening bracket comes
    with a word). A sentence that no sequence of the vocabulary's tokens can cover (e.g. one word
    and no token that opens and closes) is searched with every token allowed, and repaired."""

    def __init__(self, pieces: list[str], *, max_depth: int | None = None, **_ignored):
        parsed = [split_per_word(p.lstrip("\u2581")) for p in pieces]
        self.is_label = torch.tensor([p is not None for p in parsed])  # (W,)
        self.is_label[[PAD, BOS, EOS, UNK]] = False
        self.opens = torch.tensor([len(p[0]) if p else 0 for p in parsed])  # (W,)
        self.closes = torch.tensor([p[1] if p else 0 for p in parsed])  # (W,)
        self.max_depth = max_depth
        self.depth_cap = max_depth or int(self.opens.sum()) + 1  # depths the table tracks: 0..cap
        self._finishable = torch.zeros(1, self.depth_cap + 1, dtype=torch.bool)  # (words left, depth)
        self._finishable[0, 0] = True
        self._moves = sorted(
            {
                (o, c)
                for o, c, ok in zip(self.opens.tolist(), self.closes.tolist(), self.is_label.tolist())
                if ok
            }
        )  # distinct (opens, closes)

    def finishable(self, words_left: int) -> Tensor:
        """(words_left + 1, cap + 1) bools: whether r more words, starting at depth d, can be
        labelled into the end of one tree (r = 0: only at depth 0)."""
        table, moves = self._finishable, self._moves
        while table.size(0) <= words_left:
            r, row = table.size(0), torch.zeros(self.depth_cap + 1, dtype=torch.bool)
            for d in range(self.depth_cap + 1):
                for o, c in moves:
                    held, after = d + o, d + o - c
                    if (
                        held >= 1
                        and held <= self.depth_cap
                        and after >= (0 if r == 1 else 1)
                        and table[r - 1, after]
                    ):
                        row[d] = True
                        break
            table = torch.cat([table, row[None]])
        self._finishable = table
        return table

    def __call__(self, src_tokens: Tensor):
        device = src_tokens.device
        is_label, opens, closes = (x.to(device) for x in (self.is_label, self.opens, self.closes))
        n_words = (src_tokens.ne(PAD) & src_tokens.ne(EOS)).sum(1)  # (B,)
        finishable = self.finishable(int(n_words.max()) if len(n_words) else 0).to(device)  # (R+1, cap+1)
        coverable = finishable[n_words, 0]  # (B,) a tree of this sentence's length exists

        def mask(logp: Tensor, tokens: Tensor, alive: list[int], k: int, steps_left: Tensor) -> Tensor:
            # logp (N, W), tokens (N, 1+t) with BOS first; N = len(alive) * k rows
            sent = torch.tensor(alive, device=device).repeat_interleave(k)  # (N,)
            m = n_words[sent]  # (N,) words per row
            n = is_label[tokens].sum(1)  # (N,) words labelled so far
            depth = (opens - closes)[tokens].sum(1)  # (N,) open brackets before this token
            holding = depth[:, None] + opens  # (N, W) open while the word is written
            after = holding - closes  # (N, W) open after the token
            last = (n == m - 1)[:, None]  # (N, 1) this token labels the last word
            left = (m - n - 1).clamp(min=0)  # (N,) words left after this one
            can_finish = finishable[left[:, None], after.clamp(0, self.depth_cap)]  # (N, W)
            ok = (
                is_label
                & (n < m)[:, None]
                & holding.ge(1)
                & holding.le(self.depth_cap)
                & can_finish
                & torch.where(last, after.eq(0), after.ge(1))
            )
            ok[:, EOS] = n.eq(m)
            ok |= ~coverable[sent][:, None]  # no tree possible: every token allowed
            return logp.masked_fill(~ok, float("-inf"))

        return mask
