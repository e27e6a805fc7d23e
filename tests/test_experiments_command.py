"""`nmt prepare ptb` and `nmt parse` (nmt/experiments/command.py): the treebank prepared, parsed end to end
in every leaf form, bad treebanks and gold files one line naming the file and line."""

import json

import pytest

from nmt.cli import main
from nmt.experiments.trees import (
    linearise,
    parse_brackets,
)

GOLD = "(S (NP (DT The) (NN dog)) (VP (VBD saw) (NP (DT a) (NN cat))) (. .))"


def tree(text):
    return parse_brackets(text)[0]


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
