"""A sharded translation job on disk: its manifest, its shards' inputs and outputs, and the output
assembled from them (`nmt translate-shards`, `nmt distill`'s teacher translations).

    JOB/manifest.json       what the job is (``identity``: the input's lines and sha256, the options
                            that change the output, the sha256 of the files they name, the shard
                            size), `nmt translate`'s arguments its shards run with (``args``), and
                            the shards: line ranges, counts and the sha256 of their inputs; once
                            assembled, of their outputs and of the output too
    JOB/shards/NNNNN.src    shard NNNNN's input lines (.prefix and .constraints beside it where
                            --prefix-file / --constraints are given), written when the job is planned
    JOB/shards/NNNNN.out    its output, written whole (nmt.atomic) once translated
    JOB/shards/NNNNN.done   its record (the output's sha256 and lines), written after the output

A shard is finished when its record and its output are there and the output has the sha256 and the
number of lines its record gives; anything else (no output, a truncated or altered one, no record)
is translated again. A job is planned once: planning it again with another input or other options is
refused, naming what differs, and nothing in it is changed. Text is hashed as the job reads it: its
lines in UTF-8, each followed by a newline.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import Iterator

from .. import atomic
from ..data.lines import read_lines
from ..errors import UserError

MANIFEST = "manifest.json"
FORMAT = "nmt-translate-shards/1"
SIDES = ("src", "prefix", "constraints")  # the per-line files a shard's input holds


class ShardError(UserError):
    """A user-facing error of a sharded job; the message names the job's file or the option."""


@dataclass(frozen=True)
class Shard:
    """Lines ``start`` (from 0) to ``end`` (excluded) of the input; ``sha256``: of those lines."""

    index: int
    start: int
    end: int
    sha256: str

    @property
    def lines(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Inputs:
    """The per-line files a job splits: the input ("-": stdin), and the --prefix-file and
    --constraints lines that go with it (None: not given); ``errors``: how invalid UTF-8 is read."""

    source: str
    prefix: str | None = None
    constraints: str | None = None
    errors: str = "strict"


def text_bytes(lines: list[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode("utf-8")


def shard_name(index: int) -> str:
    return f"{index:05d}"


# ----------------------------------------------------------------------------- planning
def plan(folder: Path, inputs: Inputs, *, identity: dict, args: dict, shard_lines: int | None) -> "Job":
    """The job at ``folder``: planned there (its shards' inputs, then its manifest), or, where it is
    planned already, checked to be this job (ShardError naming what differs; nothing written).
    ``identity``: what besides the input the output depends on (options, files' sha256);
    ``args``: `nmt translate`'s arguments its shards run with; ``shard_lines`` None: the planned
    job's, else 10,000."""
    folder = Path(folder)
    if (folder / MANIFEST).exists():
        job = Job.open(folder)
        n = job.identity["shard_lines"] if shard_lines is None else shard_lines
        record, _ = split(inputs, n, None)
        job.check_identity({**identity, **record, "shard_lines": n}, inputs)
        return job
    check_free(folder)
    n = shard_lines or 10_000
    if n < 1:
        raise ShardError(f"--shard-lines {n}: must be a positive integer")
    (folder / "shards").mkdir(parents=True, exist_ok=True)
    record, shards = split(inputs, n, folder / "shards")
    manifest = {
        "format": FORMAT,
        "identity": {**identity, **record, "shard_lines": n},
        "args": args,
        "shards": [{"index": s.index, "start": s.start, "end": s.end, "sha256": s.sha256} for s in shards],
    }
    atomic.write_text(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return Job(folder, manifest)


def check_free(folder: Path) -> None:
    """ShardError where ``folder`` holds files that are not a job's (a job planned there and killed
    before its manifest leaves only ``shards``)."""
    if not folder.exists():
        return
    if not folder.is_dir():
        raise ShardError(f"{folder}: not a folder: --job takes the job's folder")
    foreign = sorted(p.name for p in folder.iterdir() if p.name != "shards" and not p.name.startswith("."))
    if foreign:
        raise ShardError(
            f"{folder}: holds {foreign[0]!r} and no {MANIFEST}: not a sharded job; give an empty or new --job"
        )


def split(inputs: Inputs, shard_lines: int, out: Path | None) -> tuple[dict, list[Shard]]:
    """One pass over the inputs: their record (lines and sha256 of each) and the shards of
    ``shard_lines`` lines, whose inputs are written into ``out`` unless it is None."""
    hashes = {side: hashlib.sha256() for side in SIDES}
    shards: list[Shard] = []
    lines = 0
    for chunk in chunks(inputs, shard_lines):
        data = {side: text_bytes(part) for side, part in chunk.items()}
        for side, b in data.items():
            hashes[side].update(b)
        k = len(shards)
        if out is not None:
            for side, b in data.items():
                atomic.write_bytes(out / f"{shard_name(k)}.{side}", b)
        n = len(chunk["src"])
        shards.append(Shard(k, lines, lines + n, hashlib.sha256(data["src"]).hexdigest()))
        lines += n
    record = {"input": {"lines": lines, "sha256": hashes["src"].hexdigest()}}
    for side in SIDES[1:]:
        given = getattr(inputs, side) is not None
        record[side] = {"sha256": hashes[side].hexdigest()} if given else None
    return record, shards


def chunks(inputs: Inputs, size: int) -> Iterator[dict[str, list[str]]]:
    """The inputs' lines, ``size`` at a time: {"src": lines, "prefix": ..., "constraints": ...}
    (the sides given); ShardError where a side has another number of lines than the input."""
    given = {"src": inputs.source, "prefix": inputs.prefix, "constraints": inputs.constraints}
    given = {side: path for side, path in given.items() if path is not None}
    readers = [read_lines(path, errors=inputs.errors) for path in given.values()]
    chunk: dict[str, list[str]] = {side: [] for side in given}
    counted = 0
    end = object()
    for row in zip_longest(*readers, fillvalue=end):
        if any(x is end for x in row):
            counts = dict(
                zip(given, (counted + (x is not end) + sum(1 for _ in r) for r, x in zip(readers, row)))
            )
            side = next(s for s in given if counts[s] != counts["src"])
            raise ShardError(f"{given[side]}: {counts[side]} {side} lines for {counts['src']} input lines")
        counted += 1
        for side, line in zip(given, row):
            chunk[side].append(line)
        if len(chunk["src"]) == size:
            yield chunk
            chunk = {side: [] for side in given}
    if chunk["src"]:
        yield chunk


# ----------------------------------------------------------------------------- a planned job
class Job:
    """A planned job (``Job.open``): its shards, their files, which are finished, the assembly."""

    def __init__(self, folder: Path, manifest: dict):
        self.folder = Path(folder)
        self.manifest = manifest
        self.identity: dict = manifest["identity"]
        self.args: dict = manifest["args"]
        self.shards = tuple(
            Shard(**{k: s[k] for k in ("index", "start", "end", "sha256")}) for s in manifest["shards"]
        )

    @classmethod
    def open(cls, folder: Path) -> "Job":
        path = Path(folder) / MANIFEST
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ShardError(
                f"{path}: no such file: plan the job first (nmt translate-shards plan)"
            ) from None
        except (OSError, ValueError) as e:
            raise ShardError(f"{path}: unreadable ({e})") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise ShardError(f"{path}: not the manifest of a sharded job ({FORMAT})")
        return cls(Path(folder), manifest)

    @property
    def path(self) -> Path:
        return self.folder / MANIFEST

    def check_identity(self, identity: dict, inputs: Inputs) -> None:
        """ShardError naming the first thing that differs between the planned job and ``identity``."""
        diff = first_difference(self.identity, identity)
        if diff is None:
            return
        key, planned, given = diff
        if key.startswith(("input", "prefix", "constraints")):
            side = key.split(".")[0]
            name = {"input": inputs.source, "prefix": inputs.prefix, "constraints": inputs.constraints}[side]
            planned = describe(self.identity[side])
            what = f"another {side} ({name}: {describe(identity[side])}; planned: {planned})"
        else:
            what = f"{key}={json.dumps(given)} (planned with {json.dumps(planned)})"
        raise ShardError(
            f"{self.path}: this job was planned for other work: {what}; rerun it with its input and "
            "options, or give another --job (nothing was changed)"
        )

    # ------------------------------------------------------------------------- a shard's files
    def file(self, index: int, suffix: str) -> Path:
        return self.folder / "shards" / f"{shard_name(index)}.{suffix}"

    def shard(self, index: int) -> Shard:
        if not 0 <= index < len(self.shards):
            raise ShardError(f"--shard {index}: {self.path} has shards 0 to {len(self.shards) - 1}")
        return self.shards[index]

    def source(self, index: int) -> dict[str, Path]:
        """Shard ``index``'s input files by side (src always; prefix, constraints where given),
        checked against the manifest (ShardError for an altered one)."""
        shard = self.shard(index)
        src = self.file(index, "src")
        if not src.is_file() or atomic.sha256_file(src) != shard.sha256:
            raise ShardError(
                f"{src}: missing or changed since the job was planned (its sha256 is not the manifest's): "
                "plan the job again in a new --job"
            )
        given = [side for side in SIDES[1:] if self.identity.get(side)]
        return {"src": src, **{side: self.file(index, side) for side in given}}

    def finished(self, index: int) -> bool:
        """True when shard ``index``'s output is there whole: its record names its input and gives
        the sha256 and line count the output has."""
        record = self.record(index)
        out = self.file(index, "out")
        if record is None or record.get("input_sha256") != self.shards[index].sha256 or not out.is_file():
            return False
        data = out.read_bytes()
        return hashlib.sha256(data).hexdigest() == record["sha256"] and data.count(b"\n") == record["lines"]

    def record(self, index: int) -> dict | None:
        try:
            record = json.loads(self.file(index, "done").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) and {"sha256", "lines"} <= set(record) else None

    def todo(self) -> list[int]:
        """The shards not finished, in order."""
        return [s.index for s in self.shards if not self.finished(s.index)]

    def write(self, index: int, lines: list[str]) -> int:
        """Shard ``index``'s output lines written whole, then its record; returns their number."""
        data = text_bytes(lines)
        atomic.write_bytes(self.file(index, "out"), data)
        record = {
            "input_sha256": self.shards[index].sha256,
            "sha256": hashlib.sha256(data).hexdigest(),
            "lines": len(lines),
        }
        atomic.write_text(self.file(index, "done"), json.dumps(record) + "\n")
        return len(lines)

    # ------------------------------------------------------------------------- the output
    def assemble(self, output: str) -> dict:
        """The shards' outputs joined in order into ``output`` ("-": stdout; a file: written whole,
        read back and checked), each checked against its record while it is read; the manifest then
        records each shard's output and the whole's. Returns the whole's record."""
        missing = self.todo()
        if missing:
            shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
            raise ShardError(
                f"{self.folder}: {len(missing)} of {len(self.shards)} shards are not translated ({shown}): "
                "run `nmt translate-shards run`, or `work` for each"
            )
        whole = hashlib.sha256()
        records = [self.record(s.index) for s in self.shards]

        def pieces() -> Iterator[bytes]:
            for shard, record in zip(self.shards, records):
                data = self.file(shard.index, "out").read_bytes()
                if hashlib.sha256(data).hexdigest() != record["sha256"]:  # changed since todo()
                    raise ShardError(f"{self.file(shard.index, 'out')}: changed while assembling; run again")
                whole.update(data)
                yield data

        if output == "-":
            for data in pieces():
                sys.stdout.buffer.write(data)
            sys.stdout.flush()
        else:
            atomic.write_chunks(output, pieces())
            if atomic.sha256_file(output) != whole.hexdigest():
                raise ShardError(f"{output}: reads back other bytes than the shards' outputs (a disk error?)")
        lines = sum(r["lines"] for r in records)
        done = {"path": output, "sha256": whole.hexdigest(), "lines": lines}
        shards = [
            {**s, "output_sha256": r["sha256"], "output_lines": r["lines"]}
            for s, r in zip(self.manifest["shards"], records)
        ]
        self.manifest = {**self.manifest, "shards": shards, "output": done}
        atomic.write_text(self.path, json.dumps(self.manifest, indent=1) + "\n")
        return done


def fingerprint(path: str) -> str:
    """The sha256 that stands for a file an option names: a file's own; an nmt checkpoint's (a
    checkpoint or run directory, nmt.checkpoint.resolve_checkpoint) that of its MANIFEST.json, which
    holds the sha256 of each of its files, with its own shortlist's (nmt.infer.shortlist, searched
    with by default) where it has one; another directory's (a CTranslate2 model), that of the
    names and sha256 of its files."""
    from ..checkpoint import MANIFEST as CHECKPOINT_MANIFEST
    from ..checkpoint import CheckpointError, resolve_checkpoint
    from ..infer.shortlist import CHECKPOINT_FILE

    p = Path(path)
    if p.is_file():
        return atomic.sha256_file(p)
    if not p.is_dir():
        raise ShardError(f"{p}: no such file or directory")
    try:
        manifest = resolve_checkpoint(p) / CHECKPOINT_MANIFEST
    except CheckpointError:
        manifest = None
    if manifest is not None and manifest.is_file():
        own = manifest.parent / CHECKPOINT_FILE
        if not own.is_file():
            return atomic.sha256_file(manifest)
        return hashlib.sha256(
            f"{atomic.sha256_file(manifest)}\t{atomic.sha256_file(own)}".encode()
        ).hexdigest()
    h = hashlib.sha256()
    for f in sorted(x for x in p.rglob("*") if x.is_file()):
        h.update(f"{f.relative_to(p).as_posix()}\t{atomic.sha256_file(f)}\n".encode())
    return h.hexdigest()


def first_difference(planned, given, key: str = "") -> tuple[str, object, object] | None:
    """(dotted key, planned value, given value) of the first leaf where two JSON values differ."""
    if isinstance(planned, dict) and isinstance(given, dict):
        for k in sorted(set(planned) | set(given)):
            diff = first_difference(planned.get(k), given.get(k), f"{key}.{k}" if key else k)
            if diff is not None:
                return diff
        return None
    return None if planned == given else (key, planned, given)


def describe(record: dict | None) -> str:
    if record is None:
        return "none"
    lines = f"{record['lines']:,} lines, " if "lines" in record else ""
    return f"{lines}sha256 {record['sha256'][:12]}"
