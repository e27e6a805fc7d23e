"""Constituency parsing (section 6.3): trees, linearisation, repair, EVALB scoring."""

import json

import pytest
import torch

from nmt.cli import main
from nmt.experiments import evalb
from nmt.experiments.parsing import WellFormedPerWord, WellFormedTrees
from nmt.experiments.trees import (
    clean,
    delinearise,
    from_per_word,
    is_bracket,
    linearise,
    parse_brackets,
    per_word,
    split_per_word,
)
from nmt.infer.options import SearchOptions

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


@pytest.mark.parametrize("leaves", ["xx", "pos", "words", "per-word"])
def test_prepare_ptb_and_parse_end_to_end(tmp_path, capsys, leaves):
    """A tiny treebank folder -> DATA_DIR -> a few training steps -> `nmt parse` -> trees + F1, and
    `nmt parse --well-formed`: no output repaired."""
    bank = tmp_path / "bank"
    bank.mkdir()
    trees = [
        GOLD,
        "( (S (NP-SBJ (PRP I)) (VP (VB give) (PRT (RP up)) (NP (-NONE- *T*))) (. .)) )",
        "(S (NP (NNP John)) (VP (VBZ runs)) (. .))",
    ]
    for number in (1, 2, 180, 190):
        (bank / f"wsj_{number:04d}.mrg").write_text("\n".join(trees) + "\n")
    data = tmp_path / "data"
    flags = {
        "xx": [],
        "pos": ["--pos-tags"],
        "words": ["--leaves", "words"],
        "per-word": ["--form", "per-word", "--copy-pairs"],
    }[leaves]
    assert (
        main(["prepare", "ptb", "--treebank", str(bank), "--out", str(data), "--min-count", "1", *flags]) == 0
    )
    gold_lines = (data / "test.gold.txt").read_text().splitlines()
    assert gold_lines[1] == "(S (NP (PRP I)) (VP (VB give) (PRT (RP up))) (. .))"
    third = (data / "train.tree.txt").read_text().splitlines()[2]
    assert (
        third
        == {
            "xx": "(S (NP XX )NP (VP XX )VP XX )S",
            "pos": "(S (NP NNP )NP (VP VBZ )VP . )S",
            "words": "(S (NP John )NP (VP runs )VP . )S",
            "per-word": "(S(NP*1 (VP*1 *1",
        }[leaves]
    )
    ptb = json.loads((data / "meta.json").read_text())["ptb"]
    assert ptb["leaf"] == ("xx" if leaves == "per-word" else leaves)
    assert ptb["form"] == ("per-word" if leaves == "per-word" else "brackets")
    assert (
        ptb["leaves"]
        == {
            "xx": ["XX"],
            "pos": [".", "DT", "NN", "NNP", "PRP", "RP", "VB", "VBD", "VBZ"],
            "words": [],
            "per-word": [],
        }[leaves]
    )
    if leaves == "per-word":  # then a copy pair per training tree: its words + <s> -> its words
        from nmt.data.dataset import ParallelDataset

        ds = ParallelDataset.load(data, "train")
        n = ptb["trees"]["train"]
        assert ptb["copy_pairs"] and len(ds) == 2 * n
        for i in range(n):
            (words, labels), (src, tgt) = ds[i], ds[n + i]
            assert src.tolist() == words.tolist() + [2] and tgt.tolist() == words.tolist()
            assert len(labels) == len(words)
        valid = ParallelDataset.load(data, "valid")
        assert len(valid) == ptb["trees"]["valid"]  # only training holds copies
    assert (
        main(
            [
                "train",
                str(data),
                "--out",
                str(tmp_path / "run"),
                "--preset",
                "tiny",
                "--train.max_steps=2",
                "--train.warmup_steps=2",
                "--train.valid_every_steps=0",
            ]
        )
        == 0
    )
    (tmp_path / "in.txt").write_text((data / "test.words.txt").read_text())
    for well_formed in ([], ["--well-formed"]):
        capsys.readouterr()
        assert (
            main(
                [
                    "parse",
                    str(tmp_path / "run"),
                    "-i",
                    str(tmp_path / "in.txt"),
                    "-o",
                    str(tmp_path / "out.txt"),
                    "--beam",
                    "3",
                    "--max-len-b",
                    "20",
                    "--gold",
                    str(data / "test.gold.txt"),
                    *well_formed,
                ]
            )
            == 0
        )
        out = (tmp_path / "out.txt").read_text().splitlines()
        assert [tree(line).words() for line in out] == [tree(g).words() for g in gold_lines]  # always a tree
        err = capsys.readouterr().err
        assert "labelled bracket (EVALB COLLINS.prm): P" in err
        if well_formed:
            assert "; 0 outputs repaired" in err
    assert main(["prepare", "ptb", "--treebank", str(bank), "--out", str(data)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (
        main(
            [
                "prepare",
                "ptb",
                "--treebank",
                str(bank),
                "--out",
                str(tmp_path / "d2"),
                "--pos-tags",
                "--leaves",
                "words",
            ]
        )
        == 2
    )
    assert "--pos-tags contradicts --leaves words" in capsys.readouterr().err
    assert (
        main(
            [
                "prepare",
                "ptb",
                "--treebank",
                str(bank),
                "--out",
                str(tmp_path / "d3"),
                "--form",
                "per-word",
                "--leaves",
                "words",
            ]
        )
        == 2
    )
    assert "per-word writes XX for each word: not with --leaves words" in capsys.readouterr().err


def test_parse_constrain_is_a_hidden_alias_of_well_formed(capsys):
    """`nmt parse --constrain` (the old spelling) searches well-formed trees as --well-formed does,
    with a one-line warning naming the new flag; --help shows only --well-formed."""
    from nmt.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["parse", "run"]).well_formed is False
    assert parser.parse_args(["parse", "run", "--well-formed"]).well_formed is True
    assert capsys.readouterr().err == ""
    assert parser.parse_args(["parse", "run", "--constrain"]).well_formed is True
    assert capsys.readouterr().err == "nmt parse: warning: --constrain is deprecated, use --well-formed\n"
    with pytest.raises(SystemExit):
        parser.parse_args(["parse", "--help"])
    out = capsys.readouterr().out
    assert "--well-formed" in out and "--constrain" not in out


def test_prepare_ptb_takes_the_treebank_from_nmt_data_dir(tmp_path, monkeypatch, capsys):
    """Without --treebank, `nmt prepare ptb` reads $NMT_DATA_DIR/ptb_sample/combined.tar.gz; with
    neither, a one-line error says what to pass."""
    import tarfile

    monkeypatch.delenv("NMT_DATA_DIR", raising=False)
    assert main(["prepare", "ptb", "--out", str(tmp_path / "a")]) == 2
    assert "--treebank PATH is required" in capsys.readouterr().err
    monkeypatch.setenv("NMT_DATA_DIR", str(tmp_path))
    assert main(["prepare", "ptb", "--out", str(tmp_path / "a")]) == 2
    assert "ptb_sample/combined.tar.gz: no such file" in capsys.readouterr().err
    bank = tmp_path / "bank"
    bank.mkdir()
    for number in (1, 180, 190):
        (bank / f"wsj_{number:04d}.mrg").write_text(GOLD + "\n")
    (tmp_path / "ptb_sample").mkdir()
    with tarfile.open(tmp_path / "ptb_sample" / "combined.tar.gz", "w:gz") as tar:
        tar.add(bank, arcname="combined")
    assert main(["prepare", "ptb", "--out", str(tmp_path / "data"), "--min-count", "1"]) == 0
    assert (tmp_path / "data" / "train.tree.txt").read_text() == linearise_text(GOLD) + "\n"


def linearise_text(text):
    return " ".join(linearise(tree(text)))


def test_malformed_trees_are_errors_naming_the_file_and_line(tmp_path, capsys):
    """A treebank or --gold file with unbalanced brackets, a stray word or bracket, two trees on a
    gold line, or a gold tree over other words than its input sentence: one line naming the file
    and the line, before any model is loaded (were: the file only, the second tree silently
    dropped, and an 'internal error' from the scorer after the whole parse)."""
    bank = tmp_path / "bank"
    bank.mkdir()
    good = "(S (NP (DT The) (NN dog)) (VP (VBD barked)) (. .))"
    for text, line, why in (
        (f"{good}\n\n(S (NP (DT A) (NN cat))\n  (VP (VBD ran))\n", 3, "unbalanced brackets"),
        (f"{good}\n{good})\n", 2, "expected '(', found ')'"),
        (f"{good}\nword {good}\n", 2, "expected '(', found 'word'"),
    ):
        (bank / "wsj_0001.mrg").write_text(text)
        assert main(["prepare", "ptb", "--treebank", str(bank), "--out", str(tmp_path / "d")]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"nmt prepare ptb: error: {bank}/wsj_0001.mrg: line {line}: {why}"), err
    words = tmp_path / "words.txt"
    words.write_text("the dog barked .\na cat ran .\n")
    gold = tmp_path / "gold.txt"
    second = "(S (NP (DT a) (NN cat)) (VP (VBD ran)) (. .))"
    for text, why in (
        (f"{good}\n(S (NP (DT a) (NN cat)) (VP (VBD ran))\n", "line 2: unbalanced brackets"),
        (f"{good}\n{second} {second}\n", "line 2: 2 trees, one per line expected"),
        (f"{good}\n(S (NP (DT a) (NN cat)) (VP (VBD ran)))\n", "line 2: 3 words, input sentence 2 has 4"),
    ):
        gold.write_text(text)
        args = ["parse", str(tmp_path / "no-checkpoint"), "-i", str(words), "--gold", str(gold)]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"nmt parse: error: {gold}: {why}") and err.count("\n") == 1, err
