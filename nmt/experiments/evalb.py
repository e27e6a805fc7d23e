"""Labelled bracket precision, recall and F1 with EVALB's COLLINS.prm conventions.

Why not a PyPI scorer: ``PYEVALB`` (0.1.3, last released 2016) has no parameter file and counts
punctuation brackets; no maintained package implements COLLINS.prm. The conventions, from
COLLINS.prm of EVALB (Sekine and Collins, 1997):
  - DELETE_LABEL TOP, -NONE- and the punctuation tags , : `` '' . : those words are removed before
    spans are computed (the gold tree's tags decide, in both trees, as EVALB does);
  - the top node (TOP / ROOT / the unlabelled outer bracket) is not a constituent;
  - preterminals (POS tags) are not constituents; labels are cut at '-' and '=' (function tags,
    indices); EQ_LABEL ADVP PRT (the two count as the same label);
  - brackets are matched as a multiset of (label, start, end); a bracket that spans only deleted
    words disappears.
Scores are corpus-level: P = matched / test brackets, R = matched / gold brackets.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .trees import Tree

PUNCTUATION_TAGS = frozenset({",", ":", "``", "''", "."})
TOP_LABELS = frozenset({"", "TOP", "ROOT"})
EQ_LABELS = {"PRT": "ADVP"}


def clean_label(label: str) -> str:
    """EVALB's label: cut at '-' or '=' (but keep labels such as -NONE-, -LRB-)."""
    if label.startswith("-"):
        return label
    for sep in ("-", "="):
        if sep in label:
            label = label.split(sep, 1)[0]
    return EQ_LABELS.get(label, label)


def brackets(tree: Tree, keep: list[bool]) -> Counter:
    """Labelled brackets (label, start, end) of ``tree`` over the kept words (``keep`` per leaf)."""
    out: Counter = Counter()
    position = [0, 0]  # leaf index, kept-word index

    def visit(node: Tree) -> None:
        if node.is_preterminal():
            position[1] += keep[position[0]]
            position[0] += 1
            return
        start = position[1]
        for child in node.children:
            visit(child)
        label = clean_label(node.label)
        if position[1] > start and label not in TOP_LABELS:
            out[(label, start, position[1])] += 1

    visit(tree)
    return out


@dataclass
class BracketScore:
    matched: int
    gold: int
    test: int

    @property
    def precision(self) -> float:
        return 100.0 * self.matched / self.test if self.test else 0.0

    @property
    def recall(self) -> float:
        return 100.0 * self.matched / self.gold if self.gold else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def score(gold: list[Tree], test: list[Tree]) -> BracketScore:
    """Corpus labelled bracket scores; ``test[i]`` must have the words (leaf count) of ``gold[i]``."""
    if len(gold) != len(test):
        raise ValueError(f"{len(gold)} gold trees but {len(test)} test trees")
    matched = n_gold = n_test = 0
    for i, (g, t) in enumerate(zip(gold, test)):
        g_tags = [tag for tag, _ in g.tagged_words()]
        if len(t.tagged_words()) != len(g_tags):
            raise ValueError(
                f"tree {i + 1}: {len(t.tagged_words())} words in the test tree, "
                f"{len(g_tags)} in the gold tree"
            )
        keep = [tag not in PUNCTUATION_TAGS and tag != "-NONE-" for tag in g_tags]
        gb, tb = brackets(g, keep), brackets(t, keep)
        matched += sum((gb & tb).values())
        n_gold += sum(gb.values())
        n_test += sum(tb.values())
    return BracketScore(matched, n_gold, n_test)
