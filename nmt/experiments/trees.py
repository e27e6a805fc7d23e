"""Penn Treebank trees: reading, cleaning (section 6.3), linearising as in Vinyals & Kaiser et al.
2014 ("Grammar as a Foreign Language") and turning model output back into a tree.

Linearisation (Vinyals & Kaiser et al. 2014, Figure 2, with POS tags normalised to XX as they do):
    (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .))
    -> (S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S
Every opening bracket carries its label, every closing bracket repeats it, and each word is one XX.
Two options, not the paper's setting: ``leaf="pos"``, each word is its POS tag instead, as in
Vinyals & Kaiser's Figure 2 before they normalise the tags,
    -> (S (NP NNP )NP (VP VBZ (NP DT NN )NP )VP . )S
and ``leaf="words"``, each word is the word itself (the output holds the sentence, with brackets):
    -> (S (NP John )NP (VP has (NP a dog )NP )VP . )S

A third form, not the paper's either: one token per word (:func:`per_word`), the brackets opened
just before the word, the word (XX), and how many brackets close just after it:
    -> (S(NP*1 (VP*0 (NP*0 *2 *1
The closing labels are implied (a closing bracket always closes the innermost open constituent), so
this is the same tree, and output token i belongs to input word i: the decoder finds its place by
position, as in a copy task, instead of counting the XX it has written among its brackets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_TOKEN = re.compile(r"\(|\)|[^\s()]+")
# what linearise writes for a word: XX, its POS tag, or itself (unambiguous: a word read from a
# bracketed file never holds "(" or ")")
LEAF_KINDS = ("xx", "pos", "words")


def is_bracket(token: str) -> bool:
    """An opening "(NP" or closing ")NP" bracket of a linearisation."""
    return len(token) > 1 and token[0] in "()"


@dataclass
class Tree:
    label: str
    children: list["Tree"] = field(default_factory=list)
    word: str | None = None  # set on preterminals only

    def is_preterminal(self) -> bool:
        return self.word is not None

    def tagged_words(self) -> list[tuple[str, str]]:
        if self.is_preterminal():
            return [(self.label, self.word)]
        return [tw for child in self.children for tw in child.tagged_words()]

    def words(self) -> list[str]:
        return [w for _, w in self.tagged_words()]

    def __str__(self) -> str:
        if self.is_preterminal():
            return f"({self.label} {self.word})"
        return f"({self.label} {' '.join(str(c) for c in self.children)})"


def parse_brackets(text: str) -> list[Tree]:
    """All trees of a bracketed string (a .mrg file or one tree per line). Raises ValueError
    naming the line (from 1) of the bad token, or of the tree left unclosed."""
    found = list(_TOKEN.finditer(text))
    tokens = [m.group() for m in found]
    trees, i = [], 0

    def line(k: int) -> int:
        return text.count("\n", 0, found[k].start()) + 1

    def node(i: int) -> tuple[Tree, int]:
        if tokens[i] != "(":
            raise ValueError(f"line {line(i)}: expected '(', found {tokens[i]!r}")
        i += 1
        label = ""
        if i < len(tokens) and tokens[i] not in "()":
            label = tokens[i]
            i += 1
        if i + 1 < len(tokens) and tokens[i] not in "()" and tokens[i + 1] == ")":
            return Tree(label, word=tokens[i]), i + 2
        children = []
        while i < len(tokens) and tokens[i] != ")":
            child, i = node(i)
            children.append(child)
        if i >= len(tokens):  # the text ended inside the tree that starts at token ``start``
            raise ValueError(f"line {line(start)}: unbalanced brackets: the tree opened here is not closed")
        return Tree(label, children), i + 1

    while i < len(tokens):
        start = i
        tree, i = node(i)
        trees.append(tree)
    return trees


def strip_function_tags(label: str) -> str:
    """NP-SBJ-1 -> NP, NP=2 -> NP; -NONE-, -LRB-, -RRB- stay."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=]", label, maxsplit=1)[0]


def clean(tree: Tree) -> Tree | None:
    """Drop -NONE- empty elements (and constituents left empty), strip function tags and the
    outer unlabelled bracket. None if nothing is left."""
    if tree.is_preterminal():
        return None if tree.label == "-NONE-" else Tree(tree.label, word=tree.word)
    children = [c for c in (clean(child) for child in tree.children) if c is not None]
    if not children:
        return None
    if tree.label in ("", "ROOT", "TOP") and len(children) == 1:
        return children[0]
    return Tree(strip_function_tags(tree.label) or "S", children)


def linearise(tree: Tree, *, leaf: str = "xx") -> list[str]:
    """Bracket sequence of ``tree``; each word as XX (``leaf="xx"``, the paper's), its POS tag
    ("pos") or itself ("words")."""
    if leaf not in LEAF_KINDS:
        raise ValueError(f"leaf={leaf!r}: must be one of {', '.join(LEAF_KINDS)}")
    if tree.is_preterminal():
        return [{"xx": "XX", "pos": tree.label, "words": tree.word}[leaf]]
    return [f"({tree.label}", *(t for c in tree.children for t in linearise(c, leaf=leaf)), f"){tree.label}"]


def per_word(tokens: list[str]) -> list[str]:
    """A bracket linearisation with XX leaves -> one token per word, "(S(NP*0": the opening brackets
    before the word, then "*" and the number of closing brackets right after it."""
    out: list[list] = []
    opens = ""
    for tok in tokens:
        if is_bracket(tok) and tok[0] == "(":
            opens += tok
        elif is_bracket(tok):
            if not out:
                raise ValueError("a closing bracket before the first word")
            out[-1][1] += 1
        else:
            out.append([opens, 0])
            opens = ""
    if opens:
        raise ValueError("opening brackets after the last word")
    return [f"{o}*{c}" for o, c in out]


_OPEN = re.compile(r"\(([^()*]+)")


def split_per_word(token: str) -> tuple[list[str], int] | None:
    """ "(S(NP*2" -> (["S", "NP"], 2); None for a token that is not a per-word label."""
    head, star, count = token.rpartition("*")
    if not star or not count.isdigit() or "".join(f"({x}" for x in _OPEN.findall(head)) != head:
        return None
    return _OPEN.findall(head), int(count)


def from_per_word(tokens: list[str]) -> list[str]:
    """Per-word tokens (model output) -> the bracket linearisation, closing each bracket with the
    label of the innermost open one; tokens that are not per-word labels are dropped, so
    :func:`delinearise` sees (and repairs) the rest."""
    out: list[str] = []
    stack: list[str] = []
    for tok in tokens:
        parsed = split_per_word(tok)
        if parsed is None:
            continue
        labels, closes = parsed
        out += [f"({x}" for x in labels] + ["XX"]
        stack += labels
        for _ in range(min(closes, len(stack))):
            out.append(")" + stack.pop())
    return out


def delinearise(
    tokens: list[str],
    words: list[str],
    *,
    root: str = "S",
    leaves: frozenset[str] | set[str] | None = frozenset({"XX"}),
) -> tuple[Tree, bool]:
    """Build a tree over ``words`` from model output, repairing it when needed. Returns the tree
    and whether it was repaired. Repairs: a closing bracket with nothing open is dropped; a closing
    bracket closes the innermost open constituent whatever its label; XX beyond the number of
    words are dropped, missing ones are added at the end of the root; open brackets are closed
    at the end; stray words next to one tree join its root; several trees (or none) are wrapped in a ``root``
    node; unknown tokens are dropped. ``leaves``: the tokens that stand for a word (XX, or the
    POS tags of a ``leaf="pos"`` linearisation); None: every token that is not a bracket (a
    ``leaf="words"`` linearisation; the leaf is labelled XX, and the input word is kept)."""
    top, n_leaves, repaired = _read_output(tokens, words, leaves=leaves)
    tree, joined = _one_tree(top, root=root)
    repaired |= joined
    if n_leaves < len(words):
        repaired = True
        tree.children.extend(Tree("XX", word=w) for w in words[n_leaves:])
    pruned = _prune(tree)
    if pruned is None or len(pruned.children) != len(tree.children):
        repaired = True
    return pruned if pruned is not None else Tree(root, [Tree("XX", word=w) for w in words]), repaired


def _read_output(
    tokens: list[str], words: list[str], *, leaves: frozenset[str] | set[str] | None
) -> tuple[Tree, int, bool]:
    """The tokens read left to right onto a stack of open constituents: a virtual top node holding
    what was read, how many words it placed, and whether a token had to be dropped (a closing
    bracket with nothing open, a leaf beyond the words, an unknown token), a closing bracket's
    label differed from the one it closed, or brackets were left open."""
    repaired = False
    stack: list[Tree] = [Tree("", [])]  # a virtual top
    n_leaves = 0
    for tok in tokens:
        if is_bracket(tok) and tok[0] == "(":
            new = Tree(tok[1:], [])
            stack[-1].children.append(new)
            stack.append(new)
        elif is_bracket(tok):
            if len(stack) == 1:
                repaired = True
                continue
            closed = stack.pop()
            repaired |= closed.label != tok[1:]
        elif leaves is None or tok in leaves:  # XX, a POS tag (the leaf keeps it as its label), a word
            if n_leaves >= len(words):
                repaired = True
                continue
            stack[-1].children.append(Tree("XX" if leaves is None else tok, word=words[n_leaves]))
            n_leaves += 1
        else:
            repaired = True
    repaired |= len(stack) > 1
    return stack[0], n_leaves, repaired


def _one_tree(top: Tree, *, root: str) -> tuple[Tree, bool]:
    """The one tree under the virtual ``top`` node, and whether it had to be made: stray words
    next to one tree join its root; several trees, or words alone, are wrapped in a ``root`` node."""
    constituents = [c for c in top.children if not c.is_preterminal()]
    if len(top.children) == 1 and constituents:
        return top.children[0], False
    if len(constituents) == 1:  # one tree and stray words: the words join its root
        return Tree(
            constituents[0].label,
            [k for c in top.children for k in (c.children if c is constituents[0] else [c])],
        ), True
    return Tree(root, top.children), True


def _prune(node: Tree) -> Tree | None:
    """``node`` without its constituents that hold no word (they cannot be scored); None if none is left."""
    if node.is_preterminal():
        return node
    kids = [k for k in (_prune(c) for c in node.children) if k is not None]
    return Tree(node.label, kids) if kids else None
