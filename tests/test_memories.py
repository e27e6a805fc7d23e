"""nmt/data/memories.py: TMX, XLIFF 1.2 and 2.0, PO and TSV read as training pairs (languages picked
by the file's attributes, inline markup kept as tags), XML read safely, TMX written back."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pytest
from timing_fixtures import assert_linear

from nmt.data.memories import (
    Counts,
    Limits,
    MemoryFileError,
    language_match,
    memory_format,
    read_memory,
    write_tmx,
)

TMX = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE tmx SYSTEM "tmx14.dtd">
<tmx version="1.4">
<header creationtool="t" creationtoolversion="1" datatype="html" segtype="sentence" adminlang="en"
 srclang="en-US" o-tmf="t"/>
<body>
<tu><tuv xml:lang="en-US"><seg>Click <bpt i="1" x="1">&lt;b&gt;</bpt>Save<ept i="1">&lt;/b&gt;</ept> &amp;
exit<ph x="2">&lt;br/&gt;</ph></seg></tuv>
<tuv xml:lang="de-DE">
<seg>Klicken Sie auf <bpt i="1" x="1">&lt;b&gt;</bpt>Speichern<ept i="1">&lt;/b&gt;</ept>
</seg></tuv></tu>
<tu><tuv xml:lang="en">
<seg>A <bpt i="1" x="5">{\\b </bpt>bold<ept i="1">}</ept> <it pos="begin">&lt;i&gt;</it>word
<hi type="term">Calc</hi><ph>{\\tab}</ph></seg></tuv>
<tuv xml:lang="de"><seg>Ein <bpt i="1" x="5">{\\b </bpt>fettes<ept i="1">}</ept> Wort</seg></tuv></tu>
<tu><tuv xml:lang="fr"><seg>Bonjour</seg></tuv><tuv xml:lang="en"><seg>Hello</seg></tuv></tu>
<tu><tuv xml:lang="en"><seg>Empty</seg></tuv><tuv xml:lang="de"><seg> </seg></tuv></tu>
</body></tmx>
"""

XLIFF12 = """<?xml version="1.0"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
<file original="a.html" source-language="de" target-language="en" datatype="html"><body>
<trans-unit id="1"><source>Öffnen Sie <g id="1" ctype="bold">Datei</g><x id="2"/></source>
<target state="translated">Open <g id="1" ctype="bold">File</g><x id="2"/></target>
<alt-trans><source>Alt</source><target>Not this</target></alt-trans></trans-unit>
<trans-unit id="2"><source>Neu</source><target state="needs-translation">Neu</target></trans-unit>
<trans-unit id="3"><source><bx id="3"/>Zwei <mrk mtype="term">Teile</mrk></source>
<target>Two <bpt id="4">&lt;span class="x"&gt;</bpt>parts<ept id="4">&lt;/span&gt;</ept><ex id="3"/></target>
</trans-unit>
</body></file></xliff>
"""

XLIFF20 = """<?xml version="1.0"?>
<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="en" trgLang="de">
<file id="f1"><unit id="u1">
<originalData><data id="d1">&lt;a href="x"&gt;</data><data id="d2">&lt;/a&gt;</data>
<data id="d3">&lt;br/&gt;</data><data id="d4">{\\par}</data></originalData>
<segment state="final"><source>See <pc id="1" dataRefStart="d1" dataRefEnd="d2">the page</pc><ph id="2"
 dataRef="d3"/> and<ph id="3" dataRef="d4"/> <sc id="5"/>more<cp hex="2013"/></source>
<target>Siehe <pc id="1" dataRefStart="d1" dataRefEnd="d2">die Seite</pc><ph id="2" dataRef="d3"/> und<ph
 id="3" dataRef="d4"/> <sc id="5"/>mehr<cp hex="2013"/></target></segment>
<ignorable><source> </source></ignorable>
<segment state="initial"><source>Draft</source><target>Entwurf</target></segment>
<segment><source>One <mrk id="m1" type="term">term</mrk> &lt; 2</source><target>Ein <mrk id="m1"
 type="term">Begriff</mrk> &lt; 2</target></segment>
</unit></file></xliff>
"""

PO = r"""# a comment
msgid ""
msgstr ""
"Project-Id-Version: x\n"
"Language: de_DE\n"
"Content-Type: text/plain; charset=UTF-8\n"

#: src/a.c:1
msgid "Save the \"file\""
msgstr "Die \"Datei\" "
"speichern"

#, fuzzy, c-format
msgid "Draft"
msgstr "Entwurf"

msgctxt "menu"
msgid "One file"
msgid_plural "%d files"
msgstr[0] "Eine Datei"
msgstr[1] "%d Dateien"

msgid "Untranslated"
msgstr ""

#~ msgid "Old"
#~ msgstr "Alt"
"""


def pairs(tmp_path: Path, name: str, text: str, *, src="en", tgt="de", **options) -> tuple[list, Counts]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    counts = Counts(memory_format(path))
    return list(read_memory(path, src=src, tgt=tgt, counts=counts, **options)), counts


def test_tmx_picks_the_languages_and_keeps_native_codes_as_tags(tmp_path):
    got, counts = pairs(tmp_path, "a.tmx", TMX)
    assert got == [
        ("Click <b>Save</b> &amp;\nexit<br/>", "Klicken Sie auf <b>Speichern</b>\n"),
        (
            'A <g id="5">bold</g> <i>word\n<hi type="term">Calc</hi><x id=""/>',
            'Ein <g id="5">fettes</g> Wort',
        ),
    ]
    assert (counts.units, counts.pairs) == (4, 2)
    assert counts.skipped == {"without both languages": 1, "empty": 1}
    text, _ = pairs(tmp_path, "b.tmx", TMX, markup="text")
    assert text[0] == ("Click Save &\nexit", "Klicken Sie auf Speichern\n")
    assert text[1] == ("A bold word\nCalc", "Ein fettes Wort")
    # the other direction: de -> en reads the same units the other way round
    back, _ = pairs(tmp_path, "c.tmx", TMX, src="de", tgt="en-us")
    assert back[0] == (got[0][1], got[0][0])


def test_xliff_1_2_reads_its_files_languages_swapped_and_skips_untranslated_targets(tmp_path):
    got, counts = pairs(tmp_path, "a.xlf", XLIFF12)  # the file is de -> en: read as en -> de
    assert got == [
        ('Open <g id="1" ctype="bold">File</g><x id="2"/>', 'Öffnen Sie <g id="1" ctype="bold">Datei</g>'
         '<x id="2"/>'),
        ('Two <span class="x">parts</span><ex id="3"/>', '<bx id="3"/>Zwei Teile'),
    ]  # fmt: skip
    assert counts.skipped == {"not translated": 1} and counts.units == 3
    with pytest.raises(MemoryFileError, match=r"a\.xlf: line 3: its languages are de -> en, not en and fr"):
        pairs(tmp_path, "a.xlf", XLIFF12, tgt="fr")


def test_xliff_2_0_resolves_original_data_and_keeps_codes_without_one_tag(tmp_path):
    got, counts = pairs(tmp_path, "a.xliff", XLIFF20)
    assert got == [
        (
            'See <a href="x">the page</a><br/> and<ph id="3" dataRef="d4"/> <sc id="5"/>more\u2013',
            'Siehe <a href="x">die Seite</a><br/> und<ph id="3" dataRef="d4"/> <sc id="5"/>mehr\u2013',
        ),
        ("One term &lt; 2", "Ein Begriff &lt; 2"),
    ]
    assert counts.skipped == {"not translated": 1} and counts.pairs == 2


def test_po_reads_entries_plurals_escapes_and_skips_fuzzy_header_and_obsolete(tmp_path):
    got, counts = pairs(tmp_path, "de.po", PO)
    assert got == [
        ('Save the "file"', 'Die "Datei" speichern'),
        ("One file", "Eine Datei"),
        ("%d files", "%d Dateien"),
    ]
    assert counts.skipped == {"not translated": 1, "empty": 1} and counts.units == 4
    back, _ = pairs(tmp_path, "de.po", PO, src="de", tgt="en")  # Language: de is the source here
    assert back[0] == ('Die "Datei" speichern', 'Save the "file"')
    with pytest.raises(MemoryFileError, match=r"de\.po: line 2: Language: de_DE, neither en nor fr"):
        pairs(tmp_path, "de.po", PO, tgt="fr")
    with pytest.raises(MemoryFileError, match=r"bad\.po: line 2: not PO syntax"):
        pairs(tmp_path, "bad.po", 'msgid "a"\nmsgfoo "b"\n')


def test_tsv_reads_two_columns_or_the_columns_a_header_of_languages_names(tmp_path):
    got, _ = pairs(tmp_path, "a.tsv", "Hello\tHallo\n\nA <b>b</b>\tEin <b>b</b>\n")
    assert got == [("Hello", "Hallo"), ("A <b>b</b>", "Ein <b>b</b>")]
    got, _ = pairs(tmp_path, "b.tsv", "de-DE\tfr\ten-GB\nHallo\tSalut\tHello\n")
    assert got == [("Hello", "Hallo")]
    with pytest.raises(MemoryFileError, match=r"c\.tsv: line 2: 3 columns, expected 2"):
        pairs(tmp_path, "c.tsv", "a\tb\na\tb\tc\n")


def test_language_codes_match_exactly_or_by_their_first_subtag():
    assert language_match("en-US", "en") == 1 and language_match("EN_us", "en-US") == 2
    assert language_match("de", "en") == 0 and language_match("", "en") == 0
    assert memory_format("x.tmx.gz") == "tmx" and memory_format("x.XLF") == "xliff"
    assert memory_format("x.en.gz") is None and memory_format("x.po") == "po"


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE tmx [<!ENTITY a "ha"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;"><!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">]>
<tmx version="1.4"><body><tu><tuv xml:lang="en"><seg>&d;</seg></tuv></tu></body></tmx>
"""

EXTERNAL = """<?xml version="1.0"?>
<!DOCTYPE xliff [
<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<xliff version="1.2"><file source-language="en" target-language="de"><body>
<trans-unit id="1"><source>&secret;</source><target>x</target></trans-unit></body></file></xliff>
"""


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("laughs.tmx", BILLION_LAUGHS, r"line 2: the DOCTYPE declares the entity &a; \(refused\)"),
        ("external.xlf", EXTERNAL, r"line 3: the DOCTYPE declares the entity &secret; \(refused\)"),
        (
            "param.tmx",
            '<?xml version="1.0"?>\n<!DOCTYPE tmx [<!ENTITY % p SYSTEM "http://x/p.dtd"> %p;]>\n<tmx/>',
            r"line 2: the DOCTYPE declares the entity %p; \(refused\)",
        ),
        (
            "undeclared.tmx",
            '<?xml version="1.0"?>\n<!DOCTYPE tmx SYSTEM "tmx14.dtd">\n<tmx><body>\n&nbsp;</body></tmx>',
            r"line 4: &nbsp; is not an XML entity",
        ),
        ("broken.tmx", '<tmx version="1.4">\n<body><tu>\n</body></tmx>', r"line 3: not well-formed XML"),
        ("other.xlf", "<html><body/></html>", r"line 1: <html> is not the root of a TMX or XLIFF file"),
        ("empty.tmx", "", r"line 1: not well-formed XML \(no element found\)"),
    ],
)
def test_unsafe_or_broken_xml_is_refused_naming_the_file_and_line(tmp_path, name, text, message):
    with pytest.raises(MemoryFileError, match=rf"{name}: {message}"):
        pairs(tmp_path, name, text)


def test_size_limits_name_the_file_and_line(tmp_path):
    body = "<tu><tuv xml:lang='en'><seg>x</seg></tuv><tuv xml:lang='de'><seg>y</seg></tuv></tu>\n"
    path = tmp_path / "big.tmx.gz"
    path.write_bytes(gzip.compress(f"<tmx><body>\n{body * 3000}</body></tmx>".encode()))
    with pytest.raises(MemoryFileError, match=r"big\.tmx\.gz: line \d+: over 100000 bytes"):
        list(read_memory(path, src="en", tgt="de", limits=Limits(max_bytes=100_000)))
    assert len(list(read_memory(path, src="en", tgt="de"))) == 3000
    long = f"<tmx><body>\n<tu><tuv xml:lang='en'><seg>{'a' * 50}</seg></tuv></tu></body></tmx>"
    with pytest.raises(MemoryFileError, match=r"long\.tmx: line 2: a segment of over 40 characters"):
        pairs(tmp_path, "long.tmx", long, limits=Limits(max_segment_chars=40))


def test_a_file_without_the_pair_says_which_languages_it_has(tmp_path):
    one = "<tmx><body><tu><tuv xml:lang='en'><seg>a</seg></tuv><tuv xml:lang='fr'><seg>b</seg></tuv></tu>"
    one += "</body></tmx>"
    with pytest.raises(MemoryFileError, match=r"no unit holds both en and de \(languages found: en, fr\)"):
        pairs(tmp_path, "fr.tmx", one)


def test_written_tmx_reads_back_as_the_tagged_segments(tmp_path):
    segments = [
        ('The <span class="emph">Base</span> &amp; <a href="x.html">link</a><br/>',
         'Die <span class="emph">Base</span>'),
        ("a &lt; b <sup>2</sup> <i>open", "ein <sub>x</sub>"),
    ]  # fmt: skip
    path = tmp_path / "w.tmx"
    assert write_tmx(segments, path, src="en", tgt="de") == 2
    assert list(read_memory(path, src="en", tgt="de")) == segments
    assert '<bpt i="1">&lt;span class="emph"&gt;</bpt>' in path.read_text()


def worst_tmx(n: int) -> bytes:
    """A TMX of about n bytes in one segment: nested paired codes, standalone codes and markers."""
    unit = '<bpt i="1">&lt;b&gt;</bpt><g>x<ph>&lt;br&gt;</ph><hi>&amp;</hi></g><ept i="1">&lt;/b&gt;</ept>'
    seg = unit * (n // len(unit))
    other = "<tuv xml:lang='de'><seg>y</seg></tuv>"
    return f"<tmx><body><tu><tuv xml:lang='en'><seg>{seg}</seg></tuv>{other}</tu></body></tmx>".encode()


def test_a_1_mb_worst_case_reads_in_linear_time(tmp_path):
    def read(data: bytes) -> None:
        path = tmp_path / "w.tmx"
        path.write_bytes(data)
        assert len(list(read_memory(path, src="en", tgt="de", limits=Limits(max_segment_chars=10**7)))) == 1

    assert_linear(read, worst_tmx, 1 << 20)
    clock = time.process_time()
    read(worst_tmx(1 << 20))
    assert time.process_time() - clock < 5.0


def test_nmt_prepare_concatenates_text_pairs_and_memories_and_records_them(tmp_path):
    from train_fixtures import write_corpus

    from nmt.cli import main

    text = write_corpus(tmp_path / "text", n_train=120, n_valid=6)
    src, tgt = (text["train"][i].read_text().splitlines() for i in (0, 1))
    write_tmx(
        [(f"<b>{a}</b>", f"<b>{b}</b>") for a, b in zip(src[:30], tgt[:30])],
        tmp_path / "t.tmx",
        src="en",
        tgt="de",
    )
    (tmp_path / "v.po").write_text(
        'msgid ""\nmsgstr "Language: de\\n"\n\nmsgid "a <i>dog</i>"\nmsgstr "ein <i>Hund</i>"\n'
    )
    out = tmp_path / "data"
    argv = ["prepare", "files", "--src", "en", "--tgt", "de", "--out", str(out), "--vocab-size", "120"]
    argv += ["--threads", "1", "--train", *map(str, text["train"]), "--train", str(tmp_path / "t.tmx")]
    assert main([*argv, "--valid", str(tmp_path / "v.po")]) == 0

    meta = json.loads((out / "meta.json").read_text())
    assert meta["splits"]["train"]["pairs"] == 150
    assert [r.get("pairs") for r in meta["sources"]["train"]] == [120, 30]
    assert meta["sources"]["train"][1]["format"] == "tmx" and meta["sources"]["valid"][0]["format"] == "po"
    assert (out / "valid.de.txt").read_text() == "ein <i>Hund</i>\n"
    one_file = [*argv[:10], "--train", str(text["train"][0]), "--force"]
    assert main(one_file) == 2 and meta == json.loads((out / "meta.json").read_text())  # not a memory
