"""`nmt export argos` (nmt/export/argos.py): the real argostranslate installs the package
offline and translates with it as `nmt translate --engine ctranslate2` does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest
from serve_fixtures import SENTENCES

from nmt.cli import main

pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")

# argostranslate in a process of its own: its settings (package and cache folders) are read from the
# environment when it is imported. Its sentence splitter is one sentence a line (the test's docstring
# says why not MiniSBD's).
ARGOS = """
import json, sys
import argostranslate.package, argostranslate.sbd, argostranslate.settings, argostranslate.translate
argostranslate.sbd.MiniSBDSentencizer.split_sentences = lambda self, text: [text]
argostranslate.package.install_from_path(sys.argv[1])
lines = json.loads(sys.argv[2])
out = {}
for beam in (1, 4):
    argostranslate.settings.beam_size = beam
    out[beam] = [argostranslate.translate.translate(line, "en", "de") for line in lines]
print(json.dumps(out))
"""


def argos_translate(package, lines: list[str], home) -> dict[str, list[str]]:
    env = dict(
        os.environ,
        HOME=str(home),
        XDG_DATA_HOME=str(home / "data"),
        XDG_CACHE_HOME=str(home / "cache"),
        XDG_CONFIG_HOME=str(home / "config"),
        ARGOS_PACKAGES_DIR=str(home / "packages"),
        ARGOS_DEVICE_TYPE="cpu",
        # argostranslate's default compute type is CTranslate2's "auto": int8 on every CPU with int8
        # kernels (all of this project's), while the engine compared with it loads the export's
        # float32; a tiny model's near-ties then differ. Equal settings: float32 on both sides.
        ARGOS_COMPUTE_TYPE="float32",
        # one CTranslate2 thread (its default: one per core), as the suite's one thread per process: two
        # threads spinning at their barriers while another process holds a core took minutes, not seconds
        ARGOS_INTRA_THREADS="1",
    )
    done = subprocess.run(
        [sys.executable, "-c", ARGOS, str(package), json.dumps(lines)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_argostranslate_installs_the_package_offline_and_translates_as_the_ctranslate2_engine(
    run_dir, tmp_path
):
    """The real argostranslate, but for its sentence splitter, replaced by one sentence a line (as
    `nmt translate --no-split`; each test line is one sentence). Not the real one: argostranslate 1.11
    splits with MiniSBD, which runs an ONNX model of the source language that a package may carry
    (minisbd/*.onnx; nmt's carries none) or that it downloads from LibreTranslate/MiniSBD's GitHub
    release on first use (offline: URLError), and no such model is at hand offline;
    ARGOS_CHUNK_TYPE=NONE, the one setting that would not split, raises NotImplementedError in 1.11."""
    pytest.importorskip("argostranslate", reason="argostranslate not installed (pip install 'nmt[argos]')")
    from nmt.checkpoint import resolve_checkpoint
    from nmt.infer.translate import Translator
    from nmt.vocab import load_spm

    package = tmp_path / "en_de.argosmodel"
    assert main(["export", "argos", str(run_dir), str(package), "--package-version", "1.2"]) == 0
    with zipfile.ZipFile(package) as z:
        meta = json.loads(z.read("translate-en_de-1_2/metadata.json"))
        assert {"translate-en_de-1_2/sentencepiece.model", "translate-en_de-1_2/model/model.bin"} <= set(
            z.namelist()
        )
    assert (meta["from_code"], meta["to_code"], meta["to_name"], meta["package_version"]) == (
        "en",
        "de",
        "German",
        "1.2",
    )

    lines = [s for s in SENTENCES if s]
    argos = argos_translate(package, lines, tmp_path / "home")
    assert (tmp_path / "home/packages/translate-en_de-1_2/metadata.json").is_file()
    ct2 = Translator.load(run_dir, engine="ctranslate2", precision="fp32")
    sp = load_spm(resolve_checkpoint(run_dir))
    # argostranslate lets CTranslate2 stop at its default of 256 pieces (nmt: |x| + 50, and at most the
    # model's positions, 256 here, less <s>) and searches with length penalty 0.2 (nmt: alpha 0.6)
    argos_length = {"max_len_a": 0.0, "max_len_b": 256}
    for beam, alpha in ((1, 0.0), (4, 0.2)):
        nmt = ct2.translate_sentences(lines, beam=beam, alpha=alpha, **argos_length)
        for line, ours, theirs in zip(lines, nmt, argos[str(beam)]):
            if len(sp.encode(ours)) < 250:
                assert theirs == ours, (beam, line)
            else:  # a runaway translation ("the big tree" at beam 1): each stops at its own limit
                assert len(sp.encode(theirs)) >= 250 and theirs.startswith(ours[:100]), (beam, line)
        assert sum(len(sp.encode(t)) < 250 for t in nmt) >= len(lines) - 3
    same = sum(a == b for a, b in zip(argos["4"], ct2.translate_sentences(lines, beam=4)))
    print(f"argostranslate and nmt translate --engine ctranslate2 (defaults): {same}/{len(lines)} the same")


@pytest.mark.parametrize(
    "out, languages, message",
    [
        ("model.zip", [], "is a .argosmodel file"),
        ("m.argosmodel", ["--languages", "en"], "--languages 'en': give SRC-TGT"),
    ],
)
def test_a_wrong_package_name_or_languages_is_one_line(run_dir, tmp_path, capsys, out, languages, message):
    assert main(["export", "argos", str(run_dir), str(tmp_path / out), *languages]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / out).exists()


def test_a_package_replaces_an_earlier_nmt_export_and_refuses_any_other_file(run_dir, tmp_path, capsys):
    """As the directory exports do: an existing .argosmodel is replaced only when `nmt export argos`
    wrote it (its model/nmt_export.json); any other file, such as a package of the Argos index, is
    one line naming it, exit 2, and left as it was."""
    package = tmp_path / "en_de.argosmodel"
    for version in ("1.0", "1.3"):
        assert main(["export", "argos", str(run_dir), str(package), "--package-version", version]) == 0
    with zipfile.ZipFile(package) as z:
        assert {n.split("/")[0] for n in z.namelist()} == {"translate-en_de-1_3"}
    index_package = tmp_path / "translate-en_de-1_0.argosmodel"
    with zipfile.ZipFile(index_package, "w") as z:  # a package of another source: no nmt_export.json
        z.writestr("translate-en_de-1_0/metadata.json", "{}")
        z.writestr("translate-en_de-1_0/model/model.bin", b"weights")
    text = tmp_path / "notes.argosmodel"
    text.write_text("not a zip\n")
    capsys.readouterr()
    for other in (index_package, text):
        before = other.read_bytes()
        assert main(["export", "argos", str(run_dir), str(other)]) == 2
        assert capsys.readouterr().err == (
            f"nmt export: error: {other}: exists and is not an nmt export; choose a new file name\n"
        )
        assert other.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([package.name, index_package.name, text.name])
