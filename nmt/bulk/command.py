"""`nmt translate-shards`: `nmt translate` as a sharded, resumable job (nmt.bulk.shards), run by
local worker processes (nmt.bulk.local_pool), by Ray Data's actors (nmt.bulk.ray_pool) or by any
scheduler, one shard per task:

    nmt translate-shards plan --job JOB CHECKPOINT -i IN -o OUT [nmt translate's options]
    nmt translate-shards run  --job JOB CHECKPOINT -i IN -o OUT [--workers W | --ray [ADDRESS]] [...]
    nmt translate-shards work --job JOB --shard I          (or --task I --tasks N: every N-th shard)
    nmt translate-shards assemble --job JOB [-o OUT]

plan and run take `nmt translate`'s own arguments (nmt.infer.command.add_translate_args) and record
them in the job; work and assemble read them from it. run plans the job (or checks that JOB is this
job), translates the shards not finished and assembles the output. ``ShardTranslator`` translates
a job's shards in one process, the request of each built as `nmt translate` builds it.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ..infer.command import (
    add_translate_args,
    check_constraints_args,
    check_translate_args,
    load_rerank,
    output_lines,
    read_translate_inputs,
    translation_request,
    translator_from_args,
)
from ..realtext.command import run_request
from ..realtext.document import document_kind
from .local_pool import Worker, WorkerDied, run_local
from .shards import Inputs, Job, ShardError, fingerprint, plan

# `nmt translate`'s arguments that change nothing in the output (or whose content the job records
# otherwise: the input and the per-line files, by their lines' sha256; the files, by fingerprint)
PER_RUN = {"input", "output", "quiet", "threads", "device", "quality", "prefix_file", "constraints"}
FILES = ("checkpoint", "rerank", "glossary", "shortlist")
PATHS = (*FILES, "input", "output", "prefix_file", "constraints", "quality")
CRASH = "NMT_SHARD_CRASH"  # crash tests: see crash_if_asked


# ----------------------------------------------------------------------------- arguments
def add_translate_shards_args(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    helps = {
        "plan": "split the input into shards and write the job's manifest (or check JOB is this job)",
        "run": "plan, translate the shards not finished (local workers or Ray), assemble -o",
        "work": "translate one shard (or a task's share) of a planned job: one task of a scheduler",
        "assemble": "join the finished shards' outputs into the output, checked against the manifest",
    }
    for name, text in helps.items():
        p = actions.add_parser(name, help=text, description=text)
        p.add_argument(
            "--job", required=True, metavar="DIR", help="the job's folder (its manifest.json, shards/)"
        )
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        if name in ("plan", "run"):
            p.add_argument(
                "--shard-lines",
                type=int,
                default=None,
                metavar="N",
                help="input lines per shard (default 10000; a planned job: its own)",
            )
            if name == "run":
                add_pool_args(p)
            add_translate_args(p)
        elif name == "work":
            add_work_args(p)
        else:
            p.add_argument(
                "-o", "--output", default=None, help="the output (default: the -o the job was planned with)"
            )


def add_pool_args(parser: argparse.ArgumentParser) -> None:
    """--workers and --ray: where a job's shards are translated (translate-shards run, distill)."""
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="W",
        help="translate with W worker processes (default 1: this process), each with its own torch "
        "threads (nmt translate-shards: --threads, default the cores / W); with --ray, W actors; 0: "
        "only plan the job",
    )
    parser.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="translate on Ray Data's actors instead (pip install 'nmt[ray]'): a local Ray without "
        "ADDRESS, else the cluster at ADDRESS (auto, ray://HOST:10001); each actor takes --threads "
        "CPUs (default 1), or one GPU with --device cuda",
    )


def add_work_args(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--shard", type=int, metavar="I", help="translate shard I (from 0)")
    which.add_argument(
        "--task", type=int, metavar="I", help="with --tasks N: translate shards I, I+N, I+2N, ... (from 0)"
    )
    parser.add_argument("--tasks", type=int, metavar="N", help="the number of tasks sharing the shards")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads for torch (default: torch's)")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: the job's)")


@dataclass(frozen=True)
class Pool:
    """Where a job's shards are translated: ``workers`` processes (or Ray actors) of ``threads``
    torch threads each (0: the cores / workers; Ray: 1); ``ray``: None, or Ray's address ("":
    a local Ray); ``device``: the job's, unless given; ``quiet``: no progress bar."""

    workers: int = 1
    threads: int = 0
    ray: str | None = None
    device: str | None = None
    quiet: bool = False  # no progress bar


# ----------------------------------------------------------------------------- the commands
def run_translate_shards(args: argparse.Namespace, overrides: dict) -> int:
    if overrides:
        raise ShardError(f"--{next(iter(overrides))}.*: translate-shards takes no configuration overrides")
    if args.action == "work":
        return work(args)
    if args.action == "assemble":
        job = Job.open(Path(args.job))
        report_output(job, job.assemble(args.output or job.args["output"]))
        return 0
    job = plan_from_args(args)
    workers = 0 if args.action == "plan" else args.workers
    pool = Pool(workers, args.threads, getattr(args, "ray", None), quiet=args.quiet)
    return translate_job(job, pool, output=args.output)


def translate_job(job: Job, pool: Pool, *, output: str) -> int:
    """The shards of ``job`` not finished translated on ``pool``, then the output assembled; with
    no workers, what is left to do said. 1 when a worker died (a rerun resumes)."""
    todo = job.todo()
    done = len(job.shards) - len(todo)
    print(
        f"{job.folder}: {len(job.shards)} shards, {done} finished, {len(todo)} to translate", file=sys.stderr
    )
    if pool.workers < 1:
        if todo:
            print(
                f"translate them: nmt translate-shards work --job {job.folder} --shard I (I = 0 .. "
                f"{len(job.shards) - 1}; finished ones are skipped), then nmt translate-shards assemble "
                f"--job {job.folder}",
                file=sys.stderr,
            )
        return 0
    if todo:
        try:
            run_shards(job, todo, pool)
        except WorkerDied as e:
            finished = len(job.shards) - len(job.todo())
            print(
                f"nmt translate-shards: {e}; {finished} of {len(job.shards)} shards are finished: rerun "
                "the same command to translate the others",
                file=sys.stderr,
            )
            return 1
    report_output(job, job.assemble(output))
    return 0


def run_shards(job: Job, todo: list[int], pool: Pool) -> None:
    """``todo`` translated on ``pool`` with a bar of sentences (the finished shards counted)."""
    from ..progress import progress

    total = sum(s.lines for s in job.shards)
    initial = total - sum(job.shards[k].lines for k in todo)
    bar = progress(total=total, initial=initial, unit="sent", desc="shards", disable=pool.quiet)
    clock = time.perf_counter()

    def on_done(index: int, lines: int) -> None:
        bar.update(job.shards[index].lines)

    workers = max(1, min(pool.workers, len(todo)))
    threads = pool.threads or (max(1, (os.cpu_count() or 1) // workers) if workers > 1 else 0)
    if pool.ray is not None:
        from .ray_pool import run_ray

        worker = Worker(start_worker, (str(job.folder), pool.threads or 1, pool.device), translate_shard)
        device = pool.device or job.args.get("device") or ""
        run_ray(
            todo,
            worker=worker,
            actors=workers,
            address=pool.ray,
            gpus=device.startswith("cuda"),
            on_done=on_done,
        )
    else:
        worker = Worker(start_worker, (str(job.folder), threads, pool.device), translate_shard)
        run_local(todo, worker=worker, workers=workers, on_done=on_done)
    bar.close()
    n = sum(job.shards[k].lines for k in todo)
    print(f"translated {n:,} lines in {time.perf_counter() - clock:.0f}s", file=sys.stderr)


def work(args: argparse.Namespace) -> int:
    """`work`: shard --shard, or the shards of task --task of --tasks, those not finished."""
    job = Job.open(Path(args.job))
    if args.shard is not None:
        job.shard(args.shard)  # ShardError for a shard the job does not have
        mine = [args.shard]
    else:
        if args.tasks is None or not 0 <= args.task < args.tasks:
            raise ShardError(f"--task {args.task} --tasks {args.tasks}: need --tasks N and 0 <= I < N")
        mine = list(range(args.task, len(job.shards), args.tasks))
    todo = [k for k in mine if not job.finished(k)]
    print(
        f"{job.folder}: shards {mine[:3]}{'...' if len(mine) > 3 else ''}: {len(todo)} to translate",
        file=sys.stderr,
    )
    if todo:
        translator = ShardTranslator(job.folder, threads=args.threads, device=args.device)
        for k in todo:
            translator.translate(k)
    return 0


def report_output(job: Job, done: dict) -> None:
    where = "stdout" if done["path"] == "-" else done["path"]
    print(
        f"{where}: {done['lines']:,} lines from {len(job.shards)} shards (sha256 {done['sha256'][:12]})",
        file=sys.stderr,
    )


# ----------------------------------------------------------------------------- planning
def plan_from_args(args: argparse.Namespace) -> Job:
    """The job of `nmt translate`'s arguments (and --job, --shard-lines): the options checked as
    `nmt translate` checks them, then planned, or checked against the job planned at --job."""
    search, mbr = check_translate_args(args)
    if document_kind(args.input) is not None:
        raise ShardError(
            f"{args.input}: a document is translated whole (nmt translate -i DOCUMENT); a sharded job "
            "splits text files (one text per line)"
        )
    if getattr(args, "quality", None):
        raise ShardError("--quality: not with a sharded job (one output file per job)")
    if args.constraints is not None:
        check_constraints_args(args)
    request = translation_request(args, search, mbr, ([], None, None))  # its own checks, and the glossary's
    if args.rerank:
        replace(request, rerank=args.rerank)  # a reranked choice the search leaves room for
    recorded = job_args(args)
    identity = {
        "options": {k: v for k, v in recorded.items() if k not in PER_RUN and k not in FILES},
        "files": fingerprints(recorded),
    }
    inputs = Inputs(args.input, args.prefix_file, args.constraints, args.errors)
    return plan(Path(args.job), inputs, identity=identity, args=recorded, shard_lines=args.shard_lines)


def translate_args_names() -> list[str]:
    """The names (dests) of `nmt translate`'s arguments."""
    parser = argparse.ArgumentParser(add_help=False)
    add_translate_args(parser)
    return sorted(vars(parser.parse_args(["CHECKPOINT"])))


def job_args(args: argparse.Namespace) -> dict:
    """`nmt translate`'s arguments of ``args``, the paths absolute (the shards run elsewhere)."""
    recorded = {name: getattr(args, name) for name in translate_args_names()}
    for name in PATHS:
        value = recorded.get(name)
        if isinstance(value, list):
            recorded[name] = [os.path.abspath(v) for v in value]
        elif value is not None and value != "-":
            recorded[name] = os.path.abspath(value)
    return recorded


def fingerprints(recorded: dict) -> dict:
    """The sha256 of each file the options name (nmt.bulk.shards.fingerprint), by option."""
    out = {}
    for name in FILES:
        value = recorded.get(name)
        if value:
            out[name] = [fingerprint(v) for v in (value if isinstance(value, list) else [value])]
    return out


# ----------------------------------------------------------------------------- translating shards
class ShardTranslator:
    """A job's shards translated in one process: `nmt translate`'s arguments as the job records them,
    the files they name checked against the job, the model loaded once, then each shard's request
    built and run as `nmt translate` builds and runs it, its output written whole."""

    def __init__(self, folder: Path, *, threads: int = 0, device: str | None = None):
        self.job = Job.open(Path(folder))
        args = argparse.Namespace(**self.job.args)
        args.quiet, args.output = True, "-"
        args.threads = threads or args.threads
        args.device = device if device is not None else args.device
        if fingerprints(vars(args)) != self.job.identity["files"]:
            raise ShardError(
                f"{self.job.path}: a file its options name (a checkpoint, --glossary, --shortlist, "
                "--rerank) changed since the job was planned: plan it again in a new --job"
            )
        self.search, self.mbr = check_translate_args(args)
        self.rerank = load_rerank(args, args.rerank_weight)
        self.translator = translator_from_args(args)
        self.args = args

    def translate(self, index: int) -> int:
        """Shard ``index`` translated and written; returns its output's number of lines."""
        shard = self.job.shard(index)
        files = self.job.source(index)
        args = copy.copy(self.args)
        args.input = str(files["src"])
        args.prefix_file = str(files["prefix"]) if "prefix" in files else None
        args.constraints = str(files["constraints"]) if "constraints" in files else None
        request = translation_request(args, self.search, self.mbr, read_translate_inputs(args))
        if self.rerank is not None:
            request = replace(request, rerank=self.rerank)
        done = run_request(args, self.translator, request)
        lines = output_lines(args, done, plain=request.sentence_level, first=shard.start + 1)
        crash_if_asked(self.job, index)
        return self.job.write(index, lines)


def crash_if_asked(job: Job, index: int) -> None:
    """For tests of crashes: with NMT_SHARD_CRASH=K in the environment, the process translating shard
    K exits at once, its translation done and not written (as a kill mid-shard leaves it), once per
    job (a marker file in JOB; a rerun or Ray's retry then finishes it)."""
    if os.environ.get(CRASH) != str(index):
        return
    marker = job.folder / f".crashed-{index}"
    if not marker.exists():
        marker.touch()
        os._exit(70)


# one ShardTranslator per worker process (the pools' start and work, module functions: they pickle by name)
_translator: ShardTranslator | Exception | None = None


def start_worker(folder: str, threads: int, device: str | None) -> None:
    """A worker process's translator (an error kept, raised by its first shard's translate_shard)."""
    global _translator
    try:
        _translator = ShardTranslator(Path(folder), threads=threads, device=device)
    except Exception as e:  # noqa: BLE001 (a user error comes back as its shard's error, not a dead pool)
        _translator = e


def translate_shard(index: int) -> int:
    if isinstance(_translator, Exception):
        raise _translator
    return _translator.translate(index)


# ----------------------------------------------------------------------------- for nmt distill
def translate_sharded(argv: list[str], job: Path, pool: Pool, *, shard_lines: int | None) -> int:
    """`nmt translate-shards run --job JOB` of `nmt translate`'s arguments ``argv`` on ``pool``
    (``pool.workers`` 0: the job planned only); returns its exit status."""
    parser = argparse.ArgumentParser(prog="nmt translate")
    add_translate_args(parser)
    args = parser.parse_args(argv)
    args.job, args.shard_lines = str(job), shard_lines
    return translate_job(plan_from_args(args), pool, output=args.output)


def plain_text_args() -> list[str]:
    """`nmt translate`'s options that turn every real-text step off: each line one sentence, as it
    is, searched once (no protected spans put back, no guard's retry)."""
    return ["--no-split", "--no-recase", "--max-words", "0", "--no-protect", "--no-guards"]
