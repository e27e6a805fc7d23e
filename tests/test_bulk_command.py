"""`nmt translate-shards` (nmt/bulk/command.py) on a tiny random-weight checkpoint: the sharded
output is `nmt translate`'s byte for byte (one worker in this process, two worker processes, shard I
of N by `work` then `assemble`); a worker killed mid-shard leaves a job a rerun completes; a truncated
or altered shard output is translated again, and only it; a job planned for another input or other
options is refused, nothing changed."""

from __future__ import annotations

import pytest
from bulk_fixtures import FAST, LINES

from nmt.bulk import command as bulk
from nmt.cli import main


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("bulk") / "in.txt"
    path.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def single(tiny_checkpoint, source):
    """`nmt translate`'s output of ``source`` with FAST."""
    out = source.parent / "single.txt"
    assert main(["translate", str(tiny_checkpoint), "-i", str(source), "-o", str(out), *FAST]) == 0
    return out.read_bytes()


def shards(action: str, job, *argv) -> int:
    return main(["translate-shards", action, "--job", str(job), *map(str, argv)])


def run(job, checkpoint, source, out, *extra) -> int:
    return shards("run", job, "--shard-lines", 4, checkpoint, "-i", source, "-o", out, *FAST, *extra)


def mtimes(job) -> dict:
    return {p.name: p.stat().st_mtime_ns for p in (job / "shards").glob("*.out")}


@pytest.mark.parametrize("extra", [["--nbest", "2"], ["--format", "html"]], ids=["nbest", "html"])
def test_one_worker_writes_nmt_translates_output_byte_for_byte(tiny_checkpoint, source, tmp_path, extra):
    single = tmp_path / "single.txt"
    assert main(["translate", str(tiny_checkpoint), "-i", str(source), "-o", str(single), *FAST, *extra]) == 0
    out = tmp_path / "out.txt"
    assert run(tmp_path / "job", tiny_checkpoint, source, out, *extra) == 0
    assert out.read_bytes() == single.read_bytes()
    assert len(list((tmp_path / "job" / "shards").glob("*.done"))) == 3


@pytest.mark.slow  # over 3 s on 2 cores: two pools of two spawned processes, each importing torch
def test_a_worker_killed_mid_shard_leaves_a_job_a_rerun_completes_with_the_same_output(
    tiny_checkpoint, source, single, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv(bulk.CRASH, "1")  # the worker of shard 1 exits before writing it, once
    job, out = tmp_path / "job", tmp_path / "out.txt"
    assert run(job, tiny_checkpoint, source, out, "--workers", 2, "--threads", 1) == 1
    assert "a worker process died" in capsys.readouterr().err
    assert not out.exists() and not (job / "shards" / "00001.done").exists()
    finished = mtimes(job)
    assert run(job, tiny_checkpoint, source, out, "--workers", 2, "--threads", 1) == 0
    assert out.read_bytes() == single
    assert {name: t for name, t in mtimes(job).items() if name in finished} == finished  # not redone


def test_a_truncated_or_altered_shard_output_is_translated_again_and_only_it(
    tiny_checkpoint, source, single, tmp_path, monkeypatch
):
    job, out = tmp_path / "job", tmp_path / "out.txt"
    assert run(job, tiny_checkpoint, source, out) == 0
    first = job / "shards" / "00000.out"
    first.write_bytes(first.read_bytes()[:-3])  # truncated
    last = job / "shards" / "00002.out"
    last.write_bytes(last.read_bytes().replace(b"\n", b"\r\n", 1))  # altered, as many lines
    redone = []
    real = bulk.ShardTranslator.translate
    monkeypatch.setattr(bulk.ShardTranslator, "translate", lambda self, k: redone.append(k) or real(self, k))
    assert run(job, tiny_checkpoint, source, out) == 0
    assert redone == [0, 2]
    assert out.read_bytes() == single


def test_a_job_planned_for_another_input_or_other_options_is_refused_and_nothing_changed(
    tiny_checkpoint, source, tmp_path, capsys
):
    job, out = tmp_path / "job", tmp_path / "out.txt"
    assert run(job, tiny_checkpoint, source, out) == 0
    before = {p: p.read_bytes() for p in [*job.rglob("*"), out] if p.is_file()}
    other = tmp_path / "other.txt"
    other.write_text(source.read_text().replace("klein", "gross"))
    capsys.readouterr()
    assert run(job, tiny_checkpoint, other, out) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"nmt translate-shards: error: {job / 'manifest.json'}: this job was planned for ")
    assert "another input (" in err and "other.txt: 11 lines" in err and err.count("\n") == 1
    assert run(job, tiny_checkpoint, source, out, "--beam", 3) == 2
    assert "options.beam=3 (planned with 2)" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in before} == before


def test_shard_i_of_n_by_work_then_assemble_is_the_pools_output(
    tiny_checkpoint, source, single, tmp_path, capsys
):
    job, out = tmp_path / "job", tmp_path / "out.txt"
    assert shards("plan", job, "--shard-lines", 4, tiny_checkpoint, "-i", source, "-o", out, *FAST) == 0
    assert "3 shards, 0 finished, 3 to translate" in capsys.readouterr().err
    assert shards("work", job, "--task", 0, "--tasks", 2) == 0  # shards 0 and 2
    assert shards("assemble", job) == 2
    assert "1 of 3 shards are not translated (1)" in capsys.readouterr().err
    assert shards("work", job, "--shard", 1) == 0
    assert shards("work", job, "--shard", 3) == 2
    assert shards("assemble", job) == 0  # into the -o it was planned with
    assert out.read_bytes() == single


def test_a_document_is_refused_for_it_is_translated_whole(tiny_checkpoint, tmp_path, capsys):
    doc = tmp_path / "page.html"
    doc.write_text("<p>der hund</p>")
    assert shards("plan", tmp_path / "job", tiny_checkpoint, "-i", doc, *FAST) == 2
    assert "a document is translated whole" in capsys.readouterr().err
    assert not (tmp_path / "job").exists()
