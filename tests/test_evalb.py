"""nmt/experiments/evalb.py: labelled bracket precision, recall and F1 with COLLINS.prm's conventions."""

import pytest

from nmt.experiments import evalb
from nmt.experiments.trees import (
    parse_brackets,
)

GOLD = "(S (NP (DT The) (NN dog)) (VP (VBD saw) (NP (DT a) (NN cat))) (. .))"


def tree(text):
    return parse_brackets(text)[0]


def test_evalb_known_precision_and_recall():
    gold = tree(GOLD)  # brackets without '.': S(0,5) NP(0,2) VP(2,5) NP(3,5)
    same = evalb.score([gold], [tree(GOLD)])
    assert (same.matched, same.gold, same.test, same.f1) == (4, 4, 4, 100.0)
    # NP(0,3) and VP(3,5) are wrong, S and the inner NP right: P = R = 2/4
    half = evalb.score([gold], [tree("(S (NP (DT The) (NN dog) (VBD saw)) (VP (NP (DT a) (NN cat))) (. .))")])
    assert (half.matched, half.precision, half.recall, half.f1) == (2, 50.0, 50.0, 50.0)
    # flat NP: 3 test brackets, all right: P = 3/3, R = 3/4, F1 = 6/7
    flat = evalb.score([gold], [tree("(S (NP (DT The) (NN dog)) (VP (VBD saw) (DT a) (NN cat)) (. .))")])
    assert (flat.precision, flat.recall) == (100.0, 75.0) and flat.f1 == pytest.approx(600 / 7)


def test_evalb_collins_conventions():
    gold = tree(GOLD)
    # punctuation attached elsewhere does not change spans; the top node and function tags do not count
    moved = tree("(TOP (S-TPC (NP-SBJ (DT The) (NN dog)) (VP (VBD saw) (NP (DT a) (NN cat)) (. .))))")
    assert evalb.score([gold], [moved]).f1 == 100.0
    assert evalb.score([tree(f"( {GOLD} )")], [moved]).f1 == 100.0
    # a bracket around punctuation only disappears; ADVP and PRT are one label
    g = tree("(S (NP (PRP I)) (VP (VB give) (PRT (RP up))) (. .))")
    t = tree("(S (NP (PRP I)) (VP (VB give) (ADVP (RB up))) (X (. .)))")
    s = evalb.score([g], [t])
    assert (s.matched, s.gold, s.test) == (4, 4, 4)
    with pytest.raises(ValueError, match="tree 1: 4 words in the test tree, 6"):
        evalb.score([gold], [tree("(S (A a) (B b) (C c) (D d))")])


def test_evalb_counts_duplicate_brackets_as_a_multiset():
    gold = tree("(S (NP (NP (NN x))) (VP (VB y)))")  # NP(0,1) twice
    test = tree("(S (NP (NN x)) (VP (VB y)))")
    s = evalb.score([gold], [test])
    assert (s.matched, s.gold, s.test) == (3, 4, 3)
