"""nmt/experiments/well_formed.py, for constituency parsing (section 6.3): searches that write only
well-formed trees."""

import pytest
import torch

from nmt.experiments.trees import (
    delinearise,
    from_per_word,
    is_bracket,
    split_per_word,
)
from nmt.experiments.well_formed import WellFormedPerWord, WellFormedTrees
from nmt.infer.options import SearchOptions

# A vocabulary for the well-formed mask: specials, brackets, words (pieces as a word-level spm writes them)
PIECES = [
    "<pad>",
    "<unk>",
    "<s>",
    "</s>",
    "\u2581(S",
    "\u2581)S",
    "\u2581(NP",
    "\u2581)NP",
    "\u2581(VP",
    "\u2581)VP",
    "\u2581XX",
    "\u2581The",
    "\u2581dog",
    "\u2581saw",
    "\u2581a",
    "\u2581cat",
    "\u2581.",
]
ID = {p.lstrip("\u2581"): i for i, p in enumerate(PIECES)}


def well_formed_outputs(leaf, sentences, *, beam, seed):
    """Well-formed beam search with a tiny Transformer of random weights (any distribution will do:
    the allowed tokens alone must make every output a well-formed tree over its sentence)."""
    from nmt.config import tiny
    from nmt.infer.search import beam_search
    from nmt.model import Transformer

    torch.manual_seed(seed)
    model = Transformer(tiny(len(PIECES))).eval()
    src = [[ID.get(w, 1) for w in s] + [3] for s in sentences]
    width = max(map(len, src))
    src = torch.tensor([r + [0] * (width - len(r)) for r in src])  # (B, S)
    hyps = beam_search(
        model,
        src,
        SearchOptions(beam=beam, alpha=0.3, nbest=beam, max_len_b=40),
        allowed_tokens=WellFormedTrees(PIECES, leaves=None if leaf == "words" else {"XX"}),
    )
    return [[[PIECES[i].lstrip("\u2581") for i in h.tokens] for h in per_sentence] for per_sentence in hyps]


@pytest.mark.parametrize("leaf", ["xx", "words"])
def test_well_formed_search_only_writes_well_formed_trees(leaf):
    """Every hypothesis of every sentence (n-best, beam 1 and 5, several random models): one root,
    balanced brackets, no empty constituent, as many leaves as words (with --leaves words: the
    words themselves, in order, <unk> for a word outside the vocabulary), nothing after the root;
    so nothing needs repair."""
    sentences = [["The", "dog", "saw", "a", "cat", "."], ["a", "Dog"], ["."]]
    for beam in (1, 5):
        for seed in range(3):
            for words, hyps in zip(sentences, well_formed_outputs(leaf, sentences, beam=beam, seed=seed)):
                assert len(hyps) == beam
                for tokens in hyps:
                    depth, closes_root = 0, 0
                    for prev, tok in zip(["<s>"] + tokens, tokens):
                        depth += 1 if tok.startswith("(") else -1 if tok.startswith(")") else 0
                        assert depth >= 0 and not (tok.startswith(")") and prev.startswith("("))
                        closes_root += depth == 0
                    assert depth == 0 and closes_root == 1 and tokens[0].startswith("(")
                    leaves = [t for t in tokens if not is_bracket(t)]
                    assert leaves == (
                        [w if w in ID else "<unk>" for w in words] if leaf == "words" else ["XX"] * len(words)
                    )
                    fixed, repaired = delinearise(tokens, words, leaves=None if leaf == "words" else {"XX"})
                    assert not repaired and fixed.words() == words


def test_well_formed_trees_forbid_exactly_what_they_say():
    """The mask of one step, read token by token (leaves=XX, 2 words): after "(S (NP XX" the next
    may be a leaf, an opening bracket or the bracket closing NP, not EOS; after "(S (NP" no
    closing bracket (empty constituent); the root closes only after the last word, then only EOS;
    an opening bracket only while the tree can still be finished within the length left."""
    mask = WellFormedTrees(PIECES, leaves={"XX"})(torch.tensor([[ID["The"], ID["dog"], 3]]))

    def allowed(prefix, steps_left=20):
        tokens = torch.tensor([[2] + [ID[t] for t in prefix.split()]])
        out = mask(torch.zeros(1, len(PIECES)), tokens, [0], 1, torch.tensor([steps_left]))
        return {PIECES[i].lstrip("\u2581") for i in out[0].isfinite().nonzero().flatten().tolist()}

    brackets = {p.lstrip("\u2581") for p in PIECES if is_bracket(p.lstrip("\u2581"))}
    opening = {b for b in brackets if b[0] == "("}
    assert allowed("") == opening
    assert allowed("(S (NP") == opening | {"XX"}
    assert allowed("(S (NP XX") == opening | {"XX", ")NP"}
    assert allowed("(S (VP (NP XX )NP XX") == {")VP"}  # the innermost open constituent is VP
    assert allowed("(S (NP XX )NP") == opening | {"XX"}
    assert allowed("(S XX") == opening | {"XX"}  # the root may not close before the last word
    assert allowed("(S XX XX") == {")S"}
    assert allowed("(S XX XX )S") == {"</s>"}
    # "(S (NP XX" needs XX, )NP, )S and EOS: 4 steps; an opening bracket needs 2 more
    assert allowed("(S (NP XX", steps_left=6) == opening | {"XX", ")NP"}
    assert allowed("(S (NP XX", steps_left=5) == {"XX", ")NP"}


PER_WORD = [
    "<pad>",
    "<unk>",
    "<s>",
    "</s>",
    "\u2581(S*0",
    "\u2581(S(NP*0",
    "\u2581(NP*1",
    "\u2581*0",
    "\u2581*1",
    "\u2581*2",
    "\u2581(S*1",
    "\u2581(VP(NP*2",
    "\u2581(NP*3",
    "\u2581dog",
    "\u2581(NP",
]
PW = {p.lstrip("\u2581"): i for i, p in enumerate(PER_WORD)}


def test_well_formed_per_word_mask_and_search():
    """The mask read token by token (2 words; then with a random model, beam 1 and 4, n-best):
    one label per word, the root open until the last word and closed by it, then EOS."""
    from nmt.config import tiny
    from nmt.infer.search import beam_search
    from nmt.model import Transformer

    well_formed = WellFormedPerWord(PER_WORD, max_depth=3)

    def allowed(prefix, c=well_formed):
        tokens = torch.tensor([[2] + [PW[t] for t in prefix.split()]])
        out = c(torch.tensor([[PW["dog"]] * 3 + [3]]))(
            torch.zeros(1, len(PER_WORD)), tokens, [0], 1, torch.tensor([20])
        )
        return {PER_WORD[i].lstrip("\u2581") for i in out[0].isfinite().nonzero().flatten().tolist()}

    # 3 words. The first must open the root and keep it open ("(NP*1" would close it at once)
    assert allowed("") == {"(S*0", "(S(NP*0"}
    # depth 2: what keeps something open, holds at most 3 ("(S(NP*0" would hold 4) and leaves a
    # depth the last word can close: "(S*0" leaves 3, and no token closes 3 within depth 3
    assert allowed("(S(NP*0") == {"*0", "*1", "(NP*1", "(S*1"}
    assert allowed("(S(NP*0", WellFormedPerWord(PER_WORD, max_depth=2)) == {"*0", "*1"}
    assert allowed("(S(NP*0 *1") == {"*1"}  # the last word closes everything still open
    assert allowed("(S(NP*0 *1 *1") == {"</s>"}
    src = torch.tensor([[PW["dog"]] * 5 + [3], [PW["dog"], 3, 0, 0, 0, 0], [PW["dog"]] * 3 + [3, 0, 0]])
    for beam in (1, 4):
        for seed in range(3):
            torch.manual_seed(seed)
            model = Transformer(tiny(len(PER_WORD))).eval()
            hyps = beam_search(
                model,
                src,
                SearchOptions(beam=beam, alpha=0.3, nbest=beam, max_len_b=20),
                allowed_tokens=well_formed,
            )
            for m, per_sentence in zip((5, 1, 3), hyps):  # one word: only 3 labels open and close the root
                assert len(per_sentence) == (min(beam, 3) if m == 1 else beam)
                for h in per_sentence:
                    tokens = [PER_WORD[i].lstrip("\u2581") for i in h.tokens]
                    assert len(tokens) == m and all(split_per_word(t) for t in tokens)
                    fixed, repaired = delinearise(from_per_word(tokens), [f"w{i}" for i in range(m)])
                    assert not repaired
