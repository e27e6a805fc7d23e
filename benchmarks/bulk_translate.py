"""Bulk translation: sentences per second of `nmt translate` (one process) against `nmt translate-shards
run` with 1 and 2 local workers (and 2 Ray actors where Ray is installed) at equal total threads, on a
test set repeated to --sentences lines; then the cost of a crash: the sharded job killed (SIGKILL to
its whole process group) once half its lines are finished, and rerun.

    python benchmarks/bulk_translate.py --checkpoint runs/demo/average \\
        --src-file ../shared/data/multi30k/test.en.gz --sentences 100000 --threads 2 \\
        [--shard-lines 2000] [--ray] [--json results/speed/bulk-translate.json]

Every run is a fresh `python -m nmt` process (its start-up and model loading counted), with the same
`nmt translate` options (--translate-args; default: beam 4, fp32, so that every output can be
compared byte for byte with the single process's). "overhead" is the sharded job's time over the
single process's, less one. The crash rows: the lines finished when the job was killed, the lines the
rerun translated (the shards not finished), the rerun's seconds, and both runs' seconds against the
uninterrupted 2-worker job's. Every setup translates all --sentences once (the crash rows about once
more): about four times `nmt translate`'s time in all, after a warm-up of 50 lines.

A worker batches each shard alone, so shards change the search's batches: a last table counts (does
not time) them per shard size, from the input's and the single process's output's piece lengths:
the length-sorted batches and the decoder's row-steps (sentences x longest output per batch), each
against one process batching the whole input. A test set repeated many times flatters the single
process there: its sorted batches hold copies of the same sentences, whose outputs end together.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import write_table  # noqa: E402

from nmt.bulk.shards import Job  # noqa: E402


def read(path: str) -> list[str]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def nmt(*argv: str) -> list[str]:
    return [sys.executable, "-m", "nmt", *argv]


LOG = Path("/dev/null")  # the runs' stderr (progress, notes): WORKDIR/log.txt


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    with open(LOG, "a") as log:
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=log)
    return time.perf_counter() - start


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sharded(args, work: Path, name: str, workers: int, threads: int, *extra: str) -> list[str]:
    """`nmt translate-shards run` of the input into WORK/NAME.txt, its job at WORK/NAME.job."""
    return nmt(
        "translate-shards",
        "run",
        "--job",
        str(work / f"{name}.job"),
        "--shard-lines",
        str(args.shard_lines),
        "--workers",
        str(workers),
        "--threads",
        str(threads),
        args.checkpoint,
        "-i",
        str(work / "input.txt"),
        "-o",
        str(work / f"{name}.txt"),
        *shlex.split(args.translate_args),
        *extra,
    )


def speed_rows(args, work: Path, n: int) -> tuple[list[list[str]], dict]:
    """One row per setup: sentences/s, the overhead against `nmt translate`, the same output or not;
    and the seconds of each setup by name."""
    t = args.threads
    single = nmt("translate", args.checkpoint, "-i", str(work / "input.txt"), "-o", str(work / "single.txt"))
    warm = nmt("translate", args.checkpoint, "-i", str(work / "warm-up.txt"), "-o", str(work / "warm-up.out"))
    timed([*warm, *shlex.split(args.translate_args)])  # the libraries and the model read from disk once
    base = timed([*single, "--threads", str(t), *shlex.split(args.translate_args)])
    want = digest(work / "single.txt")
    rows = [["nmt translate", f"1 x {t}", f"{n:,}", f"{base:.1f}", f"{n / base:.1f}", "", "yes"]]
    setups = [("shards-1", 1, t, ()), ("shards-2", 2, max(1, t // 2), ())]
    times = {"single": base}
    if args.ray:
        setups.append(("ray-2", 2, max(1, t // 2), ("--ray",)))
    for name, workers, threads, extra in setups:
        seconds = times[name] = timed(sharded(args, work, name, workers, threads, *extra))
        same = "yes" if digest(work / f"{name}.txt") == want else "NO"
        kind = "translate-shards run" + (" --ray" if extra else "")
        overhead = f"{100 * (seconds / base - 1):+.1f}%"
        rows.append(
            [kind, f"{workers} x {threads}", f"{n:,}", f"{seconds:.1f}", f"{n / seconds:.1f}", overhead, same]
        )
        print(" | ".join(rows[-1]), flush=True)
    return rows, times


def crash_row(args, work: Path, n: int, whole: float) -> list[str]:
    """The 2-worker job killed once half its lines are finished, then rerun to the end; ``whole``: the
    seconds of the same job uninterrupted (speed_rows' shards-2)."""
    workers, threads = 2, max(1, args.threads // 2)
    command = sharded(args, work, "crash", workers, threads)
    start = time.perf_counter()
    with open(LOG, "a") as log:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    finished = 0
    while process.poll() is None:
        time.sleep(0.2)
        job = work / "crash.job"
        if (job / "manifest.json").exists():
            j = Job.open(job)
            finished = sum(s.lines for s in j.shards if (job / "shards" / f"{s.index:05d}.done").exists())
            if finished >= n / 2:
                os.killpg(process.pid, signal.SIGKILL)  # the job and its workers, as a crash would
                break
    process.wait()
    killed = time.perf_counter() - start
    job = Job.open(work / "crash.job")
    todo = sum(job.shards[k].lines for k in job.todo())
    rerun = timed(command)
    same = "yes" if digest(work / "crash.txt") == digest(work / "shards-2.txt") else "NO"
    total = killed + rerun
    return [
        f"{workers} x {threads}",
        f"{n - todo:,} of {n:,}",
        f"{todo:,}",
        f"{rerun:.1f}",
        f"{total:.1f} vs {whole:.1f} ({100 * (total / whole - 1):+.1f}%)",
        same,
    ]


def batching_rows(
    src_lengths: list[int], tgt_lengths: list[int], shard_sizes: list[int], *, batch_tokens: int
):
    """What sharding does to the search's batches, counted (not timed): per shard size, the number of
    length-sorted batches (nmt's make_batches over each shard alone, as its worker forms them) and the
    decoder's row-steps (each batch's sentences x its longest output, the steps its beam search runs),
    each against one process batching the whole input. Lengths in pieces, EOS included."""
    from nmt.data.batching import make_batches

    def cost(start: int, end: int) -> tuple[int, int]:
        batches = make_batches(src_lengths[start:end], batch_tokens=batch_tokens)
        return len(batches), sum(len(b) * max(tgt_lengths[start + j] for j in b) for b in batches)

    n = len(src_lengths)
    whole_batches, whole_steps = cost(0, n)
    rows = [["one process", "1", f"{whole_batches:,}", f"{whole_steps:,}", ""]]
    for size in shard_sizes:
        parts = [cost(a, min(n, a + size)) for a in range(0, n, size)]
        batches, steps = sum(p[0] for p in parts), sum(p[1] for p in parts)
        extra = f"{100 * (steps / whole_steps - 1):+.1f}%"
        rows.append([f"shards of {size:,}", f"{len(parts):,}", f"{batches:,}", f"{steps:,}", extra])
    return rows


def piece_lengths(checkpoint: str, path: Path, side: str) -> list[int]:
    """The SentencePiece lengths (+ EOS) of each line of ``path``, by the checkpoint's model of
    ``side`` (source, target)."""
    from nmt.checkpoint import resolve_checkpoint
    from nmt.vocab import load_spm

    sp = load_spm(resolve_checkpoint(checkpoint), side=side)
    lines = path.read_text(encoding="utf-8").splitlines()
    return [len(p) + 1 for p in sp.encode(lines)]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--src-file", required=True, help="the test set, repeated to --sentences lines")
    parser.add_argument("--sentences", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=2, help="total torch threads of every setup")
    parser.add_argument("--shard-lines", type=int, default=2000)
    parser.add_argument("--translate-args", default="--beam 4 --precision fp32 --quiet")
    parser.add_argument("--ray", action="store_true", help="also 2 Ray actors (a local Ray)")
    parser.add_argument("--no-crash", action="store_true", help="leave out the crash rows")
    parser.add_argument(
        "--workdir", default="/tmp/nmt-bulk-bench", help="inputs, outputs and jobs (replaced)"
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    work = Path(args.workdir)
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)
    global LOG
    LOG = work / "log.txt"
    lines = read(args.src_file)
    n = args.sentences
    (work / "warm-up.txt").write_text("".join(line + "\n" for line in lines[:50]), encoding="utf-8")
    (work / "input.txt").write_text("".join(lines[i % len(lines)] + "\n" for i in range(n)), encoding="utf-8")
    columns = [
        "command",
        "workers x threads",
        "sentences",
        "seconds",
        "sentences/s",
        "overhead",
        "same output",
    ]
    print("| " + " | ".join(columns) + " |", flush=True)
    rows, times = speed_rows(args, work, n)
    batching_columns = [
        "input batched as",
        "shards",
        "search batches",
        "decoder row-steps",
        "extra row-steps",
    ]
    options = shlex.split(args.translate_args)
    batch_tokens = int(options[options.index("--batch-tokens") + 1]) if "--batch-tokens" in options else 2048
    batching = batching_rows(
        piece_lengths(args.checkpoint, work / "input.txt", "source"),
        piece_lengths(args.checkpoint, work / "single.txt", "target"),
        sorted({1000, 2000, 5000, 10000, args.shard_lines}),
        batch_tokens=batch_tokens,
    )
    crash_columns = [
        "workers x threads",
        "finished when killed",
        "rerun translated",
        "rerun s",
        "both runs s",
        "same",
    ]
    crash = [] if args.no_crash else [crash_row(args, work, n, times["shards-2"])]
    print("\n| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    print("\n".join("| " + " | ".join(r) + " |" for r in rows))
    print("\nbatches by shard size:\n| " + " | ".join(batching_columns) + " |\n|" + "---|" * 5)
    print("\n".join("| " + " | ".join(r) + " |" for r in batching))
    if crash:
        print(
            "\nkilled at 50% and rerun:\n| "
            + " | ".join(crash_columns)
            + " |\n|"
            + "---|" * len(crash_columns)
        )
        print("\n".join("| " + " | ".join(r) + " |" for r in crash))
    if args.json:
        taken = "repeated to" if n > len(lines) else "its first"
        what = (
            f"{Path(args.src_file).name} {taken} {n:,} lines, shards of {args.shard_lines:,} lines, "
            f"`nmt translate` options: {args.translate_args}"
        )
        write_table(
            args.json,
            "bulk_translate",
            what=what,
            columns=columns,
            rows=rows,
            crash_columns=crash_columns,
            crash_rows=crash,
            batching_columns=batching_columns,
            batching_rows=batching,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
