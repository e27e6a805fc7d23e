"""A sharded job on disk (nmt.bulk.shards) on hand-written inputs, no model: its shards and their
records, what counts as finished, a job planned for other work refused with nothing changed, the
output assembled in order and checked."""

from __future__ import annotations

import hashlib
import json

import pytest

from nmt.bulk.shards import Inputs, Job, ShardError, fingerprint, plan

LINES = [f"line {i}" for i in range(7)]
IDENTITY = {"options": {"beam": 4}, "files": {}}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def snapshot(folder) -> dict:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("".join(line + "\n" for line in LINES))
    return path


def test_a_plan_splits_the_input_into_shards_with_their_ranges_counts_and_hashes(tmp_path, source):
    job = plan(tmp_path / "job", Inputs(str(source)), identity=IDENTITY, args={"beam": 4}, shard_lines=3)
    assert [(s.start, s.end, s.lines) for s in job.shards] == [(0, 3, 3), (3, 6, 3), (6, 7, 1)]
    assert job.shards[1].sha256 == sha("line 3\nline 4\nline 5\n")
    assert (tmp_path / "job" / "shards" / "00002.src").read_text() == "line 6\n"
    manifest = json.loads((tmp_path / "job" / "manifest.json").read_text())
    assert manifest["identity"]["input"] == {"lines": 7, "sha256": sha(source.read_text())}
    assert manifest["identity"]["shard_lines"] == 3 and manifest["args"] == {"beam": 4}
    assert job.todo() == [0, 1, 2]
    assert Job.open(tmp_path / "job").shards == job.shards


def test_an_empty_input_is_a_job_of_no_shards_and_an_empty_output(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    job = plan(tmp_path / "job", Inputs(str(empty)), identity=IDENTITY, args={}, shard_lines=3)
    assert job.shards == () and job.todo() == []
    assert job.assemble(str(tmp_path / "out.txt"))["lines"] == 0
    assert (tmp_path / "out.txt").read_bytes() == b""


def test_prefix_and_constraints_lines_are_split_with_the_input_and_counted(tmp_path, source):
    prefix = tmp_path / "prefix.txt"
    prefix.write_text("".join(f"p{i}\n" for i in range(7)))
    job = plan(
        tmp_path / "job", Inputs(str(source), prefix=str(prefix)), identity=IDENTITY, args={}, shard_lines=4
    )
    assert (tmp_path / "job" / "shards" / "00001.prefix").read_text() == "p4\np5\np6\n"
    assert set(job.source(1)) == {"src", "prefix"}
    short = tmp_path / "short.txt"
    short.write_text("a\tb\n" * 5)
    with pytest.raises(ShardError, match=r"short.txt: 5 constraints lines for 7 input lines"):
        plan(
            tmp_path / "job2",
            Inputs(str(source), constraints=str(short)),
            identity=IDENTITY,
            args={},
            shard_lines=4,
        )


def test_a_shard_is_finished_only_when_its_output_matches_its_record(tmp_path, source):
    job = plan(tmp_path / "job", Inputs(str(source)), identity=IDENTITY, args={}, shard_lines=3)
    assert job.write(1, ["a", "b", "c"]) == 3
    assert job.todo() == [0, 2]
    out = job.file(1, "out")
    out.write_text("a\nb\n")  # truncated
    assert not job.finished(1)
    out.write_text("a\nX\nc\n")  # altered, same length
    assert not job.finished(1)
    out.write_text("a\nb\nc\n")
    assert job.finished(1)
    job.file(1, "done").write_text("{not json")
    assert not job.finished(1)
    job.write(1, ["a", "b", "c"])
    out.unlink()
    assert not job.finished(1)


def test_a_shard_input_changed_since_planning_is_refused(tmp_path, source):
    job = plan(tmp_path / "job", Inputs(str(source)), identity=IDENTITY, args={}, shard_lines=3)
    job.file(0, "src").write_text("line 0\nline 1\nline two\n")
    with pytest.raises(ShardError, match=r"00000.src: missing or changed since the job was planned"):
        job.source(0)
    with pytest.raises(ShardError, match=r"--shard 3: .* has shards 0 to 2"):
        job.shard(3)


def test_a_job_planned_for_another_input_or_other_options_is_refused_with_nothing_changed(tmp_path, source):
    folder = tmp_path / "job"
    job = plan(folder, Inputs(str(source)), identity=IDENTITY, args={}, shard_lines=3)
    job.write(0, ["x", "y", "z"])
    before = snapshot(folder)
    other = tmp_path / "other.txt"
    other.write_text(source.read_text().replace("line 5", "line five"))
    with pytest.raises(ShardError, match=r"planned for other work: another input \(.*other.txt: 7 lines"):
        plan(folder, Inputs(str(other)), identity=IDENTITY, args={}, shard_lines=None)
    with pytest.raises(ShardError, match=r"options.beam=5 \(planned with 4\)"):
        plan(
            folder,
            Inputs(str(source)),
            identity={**IDENTITY, "options": {"beam": 5}},
            args={},
            shard_lines=None,
        )
    with pytest.raises(ShardError, match=r"shard_lines=4 \(planned with 3\)"):
        plan(folder, Inputs(str(source)), identity=IDENTITY, args={}, shard_lines=4)
    assert snapshot(folder) == before
    again = plan(folder, Inputs(str(source)), identity=IDENTITY, args={}, shard_lines=None)  # the same job
    assert again.todo() == [1, 2]


def test_a_folder_holding_other_files_is_not_taken_for_a_job(tmp_path, source):
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "notes.txt").write_text("mine")
    with pytest.raises(ShardError, match=r"holds 'notes.txt' and no manifest.json"):
        plan(tmp_path / "job", Inputs(str(source)), identity=IDENTITY, args={}, shard_lines=3)
    with pytest.raises(ShardError, match=r"no such file: plan the job first"):
        Job.open(tmp_path / "job")


def test_the_output_is_the_shards_outputs_in_order_and_the_manifest_records_them(tmp_path, source):
    job = plan(tmp_path / "job", Inputs(str(source)), identity=IDENTITY, args={}, shard_lines=3)
    job.write(2, ["seven"])
    job.write(0, ["one", "two", "three"])
    with pytest.raises(ShardError, match=r"1 of 3 shards are not translated \(1\)"):
        job.assemble(str(tmp_path / "out.txt"))
    assert not (tmp_path / "out.txt").exists()
    job.write(1, ["four", "five", "six"])
    done = job.assemble(str(tmp_path / "out.txt"))
    text = "one\ntwo\nthree\nfour\nfive\nsix\nseven\n"
    assert (tmp_path / "out.txt").read_text() == text
    assert done == {"path": str(tmp_path / "out.txt"), "sha256": sha(text), "lines": 7}
    manifest = json.loads((tmp_path / "job" / "manifest.json").read_text())
    assert manifest["output"] == done
    assert [s["output_lines"] for s in manifest["shards"]] == [3, 3, 1]
    assert manifest["shards"][2]["output_sha256"] == sha("seven\n")


def test_a_fingerprint_is_a_files_sha256_a_checkpoints_manifests_or_a_folders_files(tmp_path):
    (tmp_path / "f.txt").write_text("x")
    assert fingerprint(str(tmp_path / "f.txt")) == sha("x")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "MANIFEST.json").write_text('{"model.safetensors": {}}')
    (ckpt / "model.safetensors").write_text("weights")
    assert fingerprint(str(ckpt)) == sha('{"model.safetensors": {}}')
    (ckpt / "shortlist.txt").write_text("listed")  # its own shortlist, searched with by default
    with_list = fingerprint(str(ckpt))
    manifest = sha('{"model.safetensors": {}}')
    assert with_list == sha(f"{manifest}\t{sha('listed')}")
    (ckpt / "shortlist.txt").write_text("listed again")
    assert fingerprint(str(ckpt)) != with_list
    other = tmp_path / "ct2"
    other.mkdir()
    (other / "model.bin").write_text("a")
    first = fingerprint(str(other))
    (other / "model.bin").write_text("b")
    assert fingerprint(str(other)) != first
    with pytest.raises(ShardError, match="no such file or directory"):
        fingerprint(str(tmp_path / "missing"))
