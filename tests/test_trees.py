"""nmt/experiments/trees.py: Penn Treebank trees cleaned, linearised (Vinyals & Kaiser 2014, section 6.3)
and back, the per-word form, unbalanced outputs repaired."""

import pytest

from nmt.experiments import evalb
from nmt.experiments.trees import (
    clean,
    delinearise,
    from_per_word,
    linearise,
    parse_brackets,
    per_word,
    split_per_word,
)

GOLD = "(S (NP (DT The) (NN dog)) (VP (VBD saw) (NP (DT a) (NN cat))) (. .))"


def tree(text):
    return parse_brackets(text)[0]


def test_clean_drops_empty_elements_function_tags_and_the_outer_bracket():
    raw = (
        "( (S (NP-SBJ-1 (NNP John)) (VP (VBZ wants) (S (NP-SBJ (-NONE- *-1)) (VP (TO to) (VB go)))) (. .)) )"
    )
    assert str(clean(tree(raw))) == "(S (NP (NNP John)) (VP (VBZ wants) (S (VP (TO to) (VB go)))) (. .))"


def test_linearise_as_vinyals_and_kaiser_2014_and_back():
    t = tree(GOLD)
    tokens = linearise(t)
    assert " ".join(tokens) == "(S (NP XX XX )NP (VP XX (NP XX XX )NP )VP XX )S"
    back, repaired = delinearise(tokens, t.words())
    assert not repaired and linearise(back) == tokens and back.words() == t.words()


def test_linearise_with_pos_tags_and_back():
    """--pos-tags: each word is its tag (Vinyals & Kaiser's Figure 2 before normalisation); the tags
    are leaves for the repair, and a tag the output puts where the gold has another stays a leaf."""
    t = tree(GOLD)
    tokens = linearise(t, leaf="pos")
    assert " ".join(tokens) == "(S (NP DT NN )NP (VP VBD (NP DT NN )NP )VP . )S"
    leaves = {"DT", "NN", "VBD", "."}
    back, repaired = delinearise(tokens, t.words(), leaves=leaves)
    assert not repaired and str(back) == GOLD
    wrong_tag, repaired = delinearise(
        "(S (NP DT NN )NP (VP VBD (NP NN NN )NP )VP . )S".split(), t.words(), leaves=leaves
    )
    assert not repaired and wrong_tag.words() == t.words()
    assert evalb.score([t], [wrong_tag]).f1 == 100.0  # tags are not brackets
    as_xx, repaired = delinearise(tokens, t.words())  # as an XX model reads it: no leaves, empty brackets
    assert repaired and [c.is_preterminal() for c in as_xx.children] == [True] * 6  # all words flat


def test_linearise_with_words_and_back():
    """--leaves words: each word is itself; every non-bracket token is a leaf (leaves=None), and the
    tree keeps the input's words whatever the output wrote in their place."""
    t = tree(GOLD)
    tokens = linearise(t, leaf="words")
    assert " ".join(tokens) == "(S (NP The dog )NP (VP saw (NP a cat )NP )VP . )S"
    back, repaired = delinearise(tokens, t.words(), leaves=None)
    assert not repaired and back.words() == t.words() and evalb.score([t], [back]).f1 == 100.0
    assert linearise(back, leaf="words") == tokens
    other, repaired = delinearise(
        "(S (NP <unk> dog )NP (VP saw (NP a a )NP )VP . )S".split(), t.words(), leaves=None
    )
    assert not repaired and other.words() == t.words()
    short, repaired = delinearise("(S (NP The dog )NP (VP saw )VP )S".split(), t.words(), leaves=None)
    assert repaired and short.words() == t.words()
    with pytest.raises(ValueError, match="leaf='tags'"):
        linearise(t, leaf="tags")


def test_per_word_form_one_token_per_word_and_back():
    t = tree(GOLD)
    tokens = per_word(linearise(t))
    assert tokens == ["(S(NP*0", "*1", "(VP*0", "(NP*0", "*2", "*1"] and len(tokens) == len(t.words())
    assert from_per_word(tokens) == linearise(t)  # closing labels come from the open ones
    back, repaired = delinearise(from_per_word(tokens), t.words())
    assert not repaired and evalb.score([t], [back]).f1 == 100.0
    assert split_per_word("(S(NP*12") == (["S", "NP"], 12) and split_per_word("*0") == ([], 0)
    for bad in ("XX", "(S", "(S*", "S*1", "(S)NP*1", "<unk>", "dog"):
        assert split_per_word(bad) is None, bad
    # model output that is not a tree: too many closes are dropped, words without a token are
    # added to the root, tokens that are not labels are skipped
    fixed, repaired = delinearise(from_per_word(["(S*3", "dog", "(NP*0"]), ["a", "b", "c"])
    assert repaired and fixed.words() == ["a", "b", "c"]
    with pytest.raises(ValueError):
        per_word(["(S", "XX", ")S", "(NP"])


@pytest.mark.parametrize(
    "output, expected",
    [
        # unclosed brackets; the sixth word is missing and joins the root
        ("(S (NP XX XX )NP (VP XX (NP XX XX", "(S (NP XX XX )NP (VP XX (NP XX XX )NP )VP XX )S"),
        # a wrong closing label, a ')' with nothing open, words after the tree
        ("(S (NP XX XX )VP )NP )S XX XX XX", "(S (NP XX XX )NP XX XX XX XX )S"),
        ("(NP XX )NP (VP XX )VP", "(S (NP XX )NP (VP XX )VP XX XX XX XX )S"),  # two trees
        ("(S XX XX XX XX XX XX XX (NP )NP )S", "(S XX XX XX XX XX XX )S"),  # extra words, empty bracket
        ("", "(S XX XX XX XX XX XX )S"),  # nothing at all
    ],
)
def test_repair_unbalanced_output(output, expected):
    words = tree(GOLD).words()
    fixed, repaired = delinearise(output.split(), words)
    assert repaired and " ".join(linearise(fixed)) == expected and fixed.words() == words
