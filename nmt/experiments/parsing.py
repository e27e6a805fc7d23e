"""English constituency parsing as translation (section 6.3): `nmt prepare ptb` and `nmt parse`.

Data (`nmt prepare ptb --treebank PATH --out DIR`): the Penn Treebank WSJ sample (a folder or the
``combined.tar.gz`` of ``ptb_sample``, files wsj_0001..wsj_0199.mrg; without ``--treebank``,
``$NMT_DATA_DIR/ptb_sample/combined.tar.gz``). Trees are
cleaned (empty elements and function tags removed, see :mod:`nmt.experiments.trees`) and linearised as in
Vinyals & Kaiser et al. 2014. Split by file, as no standard split of the sample exists:
train wsj_0001-0179, valid wsj_0180-0189, test wsj_0190-0199.

Vocabulary: word level, as the paper's WSJ-only setting (16K words for 40K sentences), shared by
both sides (one embedding matrix, section 3.4): every linearisation symbol ((NP, )NP, XX) plus the
training words seen at least ``--min-count`` times (default 2; others become <unk>). The paper's
16K covers words seen about 3+ times in 40K sentences; in ~3.5K training sentences a count of 2
keeps ~4.5K words and still gives <unk> real training examples. A SentencePiece *word* model holds
it, so the prepared directory is an ordinary DATA_DIR for `nmt train`.

``--leaves pos`` (``--pos-tags``; not the paper's setting): each word is linearised as its POS
tag instead of XX (Vinyals & Kaiser's Figure 2 before normalisation). ``--leaves words`` (not the
paper's): each word as itself, so the output is the sentence with brackets inserted; the decoder
finds its place in the source by the last word it wrote rather than by counting XX, which is what
the XX model fails to learn on this small treebank (results/ptb-parse/README.md). The scores are
the same labelled brackets in every case (EVALB does not score POS tags).

``--form per-word`` (not the paper's): one output token per word, "(S(NP*0" = the brackets
opened before the word, XX, and how many close after it (:func:`nmt.experiments.trees.per_word`;
~450 distinct tokens in the training trees), so output position i belongs to input word i.
``--copy-pairs`` adds a copy of every training sentence (words + <s> -> words) to the training
split: from the copies the model learns to attend to source position i at output position i, which
the labels alone do not teach it on 3.7K trees (results/ptb-parse/README.md).

Decoding (`nmt parse CHECKPOINT`): the paper's changes for parsing, beam 21, alpha 0.3, maximum
output length input + 300; unbalanced output is repaired into a tree (:func:`delinearise`).
``--well-formed`` (not the paper's) searches only among well-formed linearisations with one leaf per
input word (:class:`nmt.experiments.well_formed.WellFormedTrees`), so nothing needs repair.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..atomic import replace_dir
from ..data.download import DataError
from ..infer.options import SearchOptions
from ..vocab import BOS, EOS, PAD, SPECIAL_IDS, UNK
from .trees import (
    LEAF_KINDS,
    Tree,
    clean,
    delinearise,
    from_per_word,
    is_bracket,
    linearise,
    parse_brackets,
    per_word,
    split_per_word,
)
from .well_formed import WellFormedPerWord, WellFormedTrees

FORMS = ("brackets", "per-word")  # the paper's bracket sequence, or one token per word (trees.per_word)
SPLIT_FILES = {"train": range(1, 180), "valid": range(180, 190), "test": range(190, 200)}
BEAM, ALPHA, MAX_LEN_B = 21, 0.3, 300  # section 6.3
PAPER_SEARCH = SearchOptions(beam=BEAM, alpha=ALPHA, max_len_a=1.0, max_len_b=MAX_LEN_B)  # |x| + 300


def read_treebank(path: str | Path) -> dict[str, list[Tree]]:
    """{file name: cleaned trees} from a folder of .mrg files or a .tar.gz of one."""
    path = Path(path)
    texts: dict[str, str] = {}
    if path.is_dir():
        for f in sorted(path.rglob("wsj_*.mrg")):
            texts[f.name] = f.read_text(encoding="utf-8")
    elif path.is_file() and path.name.endswith((".tar.gz", ".tgz", ".tar")):
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                name = Path(member.name).name
                if member.isfile() and name.startswith("wsj_") and name.endswith(".mrg"):
                    texts[name] = tar.extractfile(member).read().decode("utf-8")
    else:
        raise DataError(f"{path}: not a folder of wsj_*.mrg files or a .tar.gz of one")
    if not texts:
        raise DataError(f"{path}: no wsj_*.mrg files found")
    out = {}
    for name, text in sorted(texts.items()):
        try:
            trees = [clean(t) for t in parse_brackets(text)]
        except (ValueError, IndexError) as e:
            raise DataError(f"{path}/{name}: {e}") from None
        out[name] = [t for t in trees if t is not None]
    return out


def file_split(name: str) -> str | None:
    number = int(name[4:8])
    for split, numbers in SPLIT_FILES.items():
        if number in numbers:
            return split
    return None


def word_ids(sp, words: list[str]) -> list[int]:
    """One id per word (<unk> for unknown words). SentencePiece's own encode would merge adjacent
    unknown words into one <unk>, and the parser must see every word."""
    return [sp.piece_to_id("\u2581" + w) for w in words]


def shape_limits(linearisations: list[list[str]]) -> dict:
    """The most opening brackets in a row and the greatest depth in these linearised trees."""
    open_run = depth = 0
    for tokens in linearisations:
        run = d = 0
        for tok in tokens:
            opening = is_bracket(tok) and tok[0] == "("
            run = run + 1 if opening else 0
            d += 1 if opening else -1 if is_bracket(tok) else 0
            open_run, depth = max(open_run, run), max(depth, d)
    return {"max_open_run": open_run, "max_depth": depth}


def write_split(
    sp, trees: list[Tree], linear: list[list[str]], prefix: Path, *, dtype: np.dtype, copy_pairs: bool = False
) -> dict:
    """{prefix}.{src,tgt}.bin and .offsets.npy in `nmt prepare`'s format (see nmt/data/dataset.py):
    the words of ``trees`` and their linearisations ``linear``; ``copy_pairs``: then, for every
    tree, a copy pair (its words + <s> -> its words; see prepare_ptb)."""
    sources = [word_ids(sp, t.words()) for t in trees]
    targets = [word_ids(sp, tokens) for tokens in linear]
    if copy_pairs:  # <s> never starts a source: at the end (before EOS) it marks the copy task
        sources, targets = sources + [ids + [BOS] for ids in sources], targets + sources
    counts = {"pairs": len(sources)}
    for side, sequences in (("src", sources), ("tgt", targets)):
        lengths = np.array([len(x) for x in sequences], dtype=np.int64)
        offsets = np.zeros(len(sequences) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.array([i for x in sequences for i in x], dtype=dtype)
        Path(f"{prefix}.{side}.bin").write_bytes(flat.tobytes())
        np.save(f"{prefix}.{side}.offsets.npy", offsets)
        counts[f"{side}_tokens"] = int(offsets[-1])
    return counts


@dataclass(frozen=True)
class PtbRecipe:
    """How `nmt prepare ptb` writes the trees (its options, recorded in meta.json["ptb"]):
    ``leaf`` (trees.LEAF_KINDS), ``form`` (FORMS), ``copy_pairs`` and the vocabulary's ``min_count``."""

    min_count: int = 2
    leaf: str = "xx"
    form: str = "brackets"
    copy_pairs: bool = False

    def check(self) -> None:
        """DataError for a leaf kind or form that does not exist, or a per-word form without XX."""
        if self.leaf not in LEAF_KINDS:
            raise DataError(f"leaves {self.leaf!r}: must be one of {', '.join(LEAF_KINDS)}")
        if self.form not in FORMS:
            raise DataError(f"form {self.form!r}: must be one of {', '.join(FORMS)}")
        if self.form == "per-word" and self.leaf != "xx":
            raise DataError(f"--form per-word writes XX for each word: not with --leaves {self.leaf}")

    def description(self) -> str:
        """meta.json's "linearisation"."""
        leaf = {
            "xx": "POS tags as XX",
            "pos": "POS tags kept (--leaves pos)",
            "words": "words kept (--leaves words)",
        }[self.leaf]
        form = "" if self.form == "brackets" else ", one token per word (--form per-word)"
        return f"Vinyals & Kaiser et al. 2014, {leaf}{form}"


@dataclass(frozen=True)
class WordVocabulary:
    """The shared word-level vocabulary (module docstring): every linearisation symbol of the
    training targets (``symbols``, with their counts) and the training words (``words``, counted)
    seen at least ``min_count`` times that are not symbols (``kept``)."""

    words: Counter
    symbols: Counter
    kept: list[str]

    @classmethod
    def count(cls, trees: list[Tree], targets: list[list[str]], recipe: PtbRecipe) -> "WordVocabulary":
        """From the training ``trees`` and their linearisations ``targets``; with --leaves words
        only the brackets are symbols (a per-word form: every token)."""
        words = Counter(w for t in trees for w in t.words())
        symbols = Counter(s for tokens in targets for s in tokens if recipe.leaf != "words" or is_bracket(s))
        kept = sorted(w for w, c in words.items() if c >= recipe.min_count and w not in symbols)
        return cls(words, symbols, kept)

    def ordered(self) -> list[str]:
        """Each kept word and symbol once: the symbols, then the words, most frequent first."""
        return sorted(self.symbols, key=lambda s: -self.symbols[s]) + sorted(
            self.kept, key=lambda w: -self.words[w]
        )

    def train_unk_rate(self) -> float:
        """The share of training words that become <unk>."""
        kept = set(self.kept)
        n_unk = sum(c for w, c in self.words.items() if w not in kept and w not in self.symbols)
        return round(n_unk / max(1, sum(self.words.values())), 4)


def split_by_file(files: dict[str, list[Tree]], treebank: str | Path) -> dict[str, list[Tree]]:
    """The trees of train, valid and test (SPLIT_FILES); DataError when train has none."""
    splits: dict[str, list[Tree]] = {"train": [], "valid": [], "test": []}
    for name, trees in files.items():
        split = file_split(name)
        if split:
            splits[split].extend(trees)
    if not splits["train"]:
        raise DataError(f"{treebank}: no training trees (files wsj_0001-0179)")
    return splits


def prepare_ptb(
    treebank: str | Path,
    out: str | Path,
    *,
    min_count: int = 2,
    force: bool = False,
    leaf: str = "xx",
    form: str = "brackets",
    copy_pairs: bool = False,
    log=print,
) -> dict:
    """Write a DATA_DIR (meta.json, spm.model, binarized splits, tree files) atomically. ``leaf``:
    how a word is linearised (trees.LEAF_KINDS: "xx", the paper's, "pos" or "words"); ``form``:
    "brackets" (the paper's) or "per-word" (one token per word; XX leaves only); ``copy_pairs``
    (not the paper's): the training split also holds, for every tree, the pair (its words + <s>
    -> its words). A copy is learned by attending to source position i at output position i (the
    embeddings are tied), which is the alignment a per-word parser needs and does not find from
    3.7K trees alone (results/ptb-parse/README.md); `nmt parse` never adds the <s>."""
    recipe = PtbRecipe(min_count=min_count, leaf=leaf, form=form, copy_pairs=copy_pairs)
    recipe.check()
    out = Path(out)
    if out.exists() and not (force or (out.is_dir() and not any(out.iterdir()))):
        raise DataError(f"{out} already exists; pass --force to replace it")
    splits = split_by_file(read_treebank(treebank), treebank)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        meta = write_ptb_data(tmp, splits, treebank=treebank, recipe=recipe)
        replace_dir(tmp, out)  # an existing DIR is renamed aside first, removed once the new one is in
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    ptb = meta["ptb"]
    log(
        f"ptb: {ptb['trees']} trees (train/valid/test by file), vocabulary {meta['vocab_size']} "
        f"({ptb['words_kept']} words seen >= {min_count} times + {ptb['symbols']} tree symbols + 4 special), "
        f"train <unk> rate {ptb['train_unk_rate']:.1%}"
    )
    return meta


def write_ptb_data(
    tmp: Path, splits: dict[str, list[Tree]], *, treebank: str | Path, recipe: PtbRecipe
) -> dict:
    """Fill the empty folder ``tmp``: the trees linearised, the text files, the word vocabulary,
    the binarized splits and meta.json (returned)."""
    brackets = {split: [linearise(t, leaf=recipe.leaf) for t in trees] for split, trees in splits.items()}
    linear = (
        brackets
        if recipe.form == "brackets"
        else {split: [per_word(tokens) for tokens in seqs] for split, seqs in brackets.items()}
    )
    vocab = WordVocabulary.count(splits["train"], linear["train"], recipe)
    write_tree_texts(tmp, splits, linear)
    sp = train_word_spm(vocab.ordered(), tmp)
    dtype = "uint16" if sp.get_piece_size() <= 1 << 16 else "int32"
    split_meta = {}
    for split, trees in splits.items():
        counts = write_split(
            sp,
            trees,
            linear[split],
            tmp / split,
            dtype=np.dtype(dtype),
            copy_pairs=recipe.copy_pairs and split == "train",
        )
        counts["text"] = [f"{split}.words.txt", f"{split}.tree.txt"]
        split_meta[split] = counts
    meta = {
        "format": "nmt-prepared-data",
        "version": 1,
        "dataset": "ptb",
        "src_lang": "words",
        "tgt_lang": "tree",
        "vocab_size": sp.get_piece_size(),
        "dtype": dtype,
        "special_ids": SPECIAL_IDS,
        "splits": split_meta,
        "ptb": ptb_record(treebank, splits, vocab, recipe, train_brackets=brackets["train"]),
    }
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def write_tree_texts(tmp: Path, splits: dict[str, list[Tree]], linear: dict[str, list[list[str]]]) -> None:
    """{split}.words.txt (the sentences), {split}.tree.txt (their linearisations) and
    {split}.gold.txt (the cleaned trees), one per line."""
    for split, trees in splits.items():
        (tmp / f"{split}.words.txt").write_text("".join(" ".join(t.words()) + "\n" for t in trees))
        (tmp / f"{split}.tree.txt").write_text("".join(" ".join(tokens) + "\n" for tokens in linear[split]))
        (tmp / f"{split}.gold.txt").write_text("".join(str(t) + "\n" for t in trees))


def train_word_spm(ordered: list[str], tmp: Path):
    """A SentencePiece *word* model holding exactly ``ordered`` (and the special ids), written to
    tmp/spm.model and tmp/spm.vocab."""
    from ..data.bpe import train_spm

    vocab_file = tmp / "vocab.in"  # each kept word / symbol once, most frequent first
    vocab_file.write_text("".join(w + "\n" for w in ordered))
    sp = train_spm(
        [vocab_file],
        tmp / "spm",
        seed=0,
        model_type="word",
        vocab_size=len(ordered) + len(SPECIAL_IDS),
        pad_id=PAD,
        unk_id=UNK,
        bos_id=BOS,
        eos_id=EOS,
        normalization_rule_name="identity",
        split_by_whitespace=True,
        hard_vocab_limit=False,
        character_coverage=1.0,
    )
    vocab_file.unlink()
    return sp


def ptb_record(
    treebank: str | Path,
    splits: dict[str, list[Tree]],
    vocab: WordVocabulary,
    recipe: PtbRecipe,
    *,
    train_brackets: list[list[str]],
) -> dict:
    """meta.json["ptb"]: where the trees came from, the vocabulary, the recipe, and what `nmt
    parse` needs (the training trees' shape limits, the tokens that stand for a word)."""
    return {
        "treebank": str(treebank),
        "split_files": {s: [r.start, r.stop - 1] for s, r in SPLIT_FILES.items()},
        "trees": {s: len(t) for s, t in splits.items()},
        "min_count": recipe.min_count,
        "words_kept": len(vocab.kept),
        "symbols": len(vocab.symbols),
        "train_unk_rate": vocab.train_unk_rate(),
        "linearisation": recipe.description(),
        "leaf": recipe.leaf,
        "form": recipe.form,
        "copy_pairs": recipe.copy_pairs,
        **shape_limits(train_brackets),  # for `nmt parse --well-formed`
        # tokens standing for a word (with --leaves words: every non-bracket token)
        "leaves": []
        if recipe.leaf == "words" or recipe.form == "per-word"
        else sorted(s for s in vocab.symbols if not is_bracket(s)),
    }


@dataclass(frozen=True)
class Linearisation:
    """How a model writes a tree as tokens (meta.json's ``ptb``): ``form`` "brackets" (the paper's
    bracket sequence) or "per-word" (one token per word, XX leaves); ``leaves``: the tokens that stand
    for a word (``ptb.leaves``; None for a ``--leaves words`` model: every non-bracket token)."""

    form: str = "brackets"
    leaves: frozenset[str] | None = frozenset({"XX"})

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise ValueError(f"form={self.form!r}: must be one of {', '.join(FORMS)}")


def parse_sentences(
    model,
    sp,
    sentences: list[list[str]],
    options: SearchOptions = PAPER_SEARCH,
    *,
    device=None,
    linearisation: Linearisation = Linearisation(),
    well_formed: bool = False,
    limits: dict | None = None,
) -> tuple[list[Tree], int]:
    """Trees for tokenised sentences (beam search with ``options`` over the trees written as
    ``linearisation`` says, then repair) and how many outputs needed repair. ``well_formed``: search
    only well-formed trees (:class:`WellFormedTrees`, or :class:`WellFormedPerWord` for the per-word
    form, with ``limits``: meta.json's ``ptb.max_open_run`` / ``max_depth``)."""
    from ..infer.translate import translate_ids

    form, leaves = linearisation.form, linearisation.leaves
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    allowed_tokens = None
    if well_formed and form == "per-word":
        allowed_tokens = WellFormedPerWord(pieces, **(limits or {}))
    elif well_formed:
        allowed_tokens = WellFormedTrees(pieces, leaves=leaves, **(limits or {}))
    outputs = translate_ids(
        model,
        [word_ids(sp, s) for s in sentences],
        options,
        device=device or "cpu",
        allowed_tokens=allowed_tokens,
    )
    trees, repaired = [], 0
    for words, ids in zip(sentences, outputs):
        tokens = [pieces[i].lstrip("\u2581") for i in ids]
        if form == "per-word":  # a per-word token that is not one (<unk>) counts as a repair
            dropped = any(split_per_word(t) is None for t in tokens)
            tree, fixed = delinearise(from_per_word(tokens), words, leaves=frozenset({"XX"}))
            fixed |= dropped
        else:
            tree, fixed = delinearise(tokens, words, leaves=leaves)
        trees.append(tree)
        repaired += fixed
    return trees, repaired
