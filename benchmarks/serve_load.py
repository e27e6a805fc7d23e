"""Load test of `nmt serve` on loopback: throughput and latency percentiles at several
concurrencies, with dynamic batching and with batching off, against offline translation.

    python benchmarks/serve_load.py runs/demo/average --sentences runs/demo/data/test.en.txt

Each client sends one sentence per request (beam 4, alpha 0.6) over a kept-alive connection, in
a loop over the first --n sentences, until --requests requests per level or --max-seconds. The
server runs as a subprocess on 127.0.0.1 (never another address). Baselines on the same
sentences and threads: offline = one `Translator.translate_sentences` call over all of them (what
`nmt translate` does, model load excluded), and the `nmt translate` command itself (wall time,
model load included); direct = `Translator.translate_sentences([s])` one sentence at a time (latency).
Prints markdown tables; ``--json FILE`` writes them with the machine (benchmarks/machine.py's
provenance): what docs/performance.md's serving tables are made from (scripts/figures.py).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import write_table  # noqa: E402  (benchmarks/machine.py)

COLUMNS = ["server", "clients", "requests", "errors", "sent/s", "vs offline", "p50 ms", "p95 ms", "p99 ms"]
BASELINE_COLUMNS = ["baseline", "sent/s", "p50 ms"]


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s)) - 1))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    checkpoint: str, extra: list[str], *, threads: int | None = None, cwd: Path = REPO
) -> tuple[subprocess.Popen, int]:
    """`nmt serve m=CHECKPOINT EXTRA` of the checkout at ``cwd`` on a free loopback port, once /health
    answers; ``threads``: its OMP_NUM_THREADS."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(cwd))
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nmt",
            "serve",
            f"m={checkpoint}",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *extra,
        ],
        env=env,
        cwd=cwd,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return proc, port
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit("nmt serve did not start")


def load_level(
    port: int, sentences: list[str], *, concurrency: int, requests: int, max_seconds: float
) -> dict:
    latencies: list[float] = []
    errors = [0]
    counter = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + max_seconds

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while True:
            with lock:
                i = counter[0]
                if i >= requests or time.monotonic() > stop_at:
                    return
                counter[0] += 1
            body = json.dumps({"text": sentences[i % len(sentences)], "beam": 4, "alpha": 0.6})
            start = time.perf_counter()
            conn.request("POST", "/translate", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            elapsed = time.perf_counter() - start
            with lock:
                if response.status == 200:
                    latencies.append(elapsed)
                else:
                    errors[0] += 1

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    return {
        "n": len(latencies),
        "errors": errors[0],
        "sent_s": len(latencies) / wall,
        "p50": percentile(latencies, 50),
        "p95": percentile(latencies, 95),
        "p99": percentile(latencies, 99),
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkpoint")
    parser.add_argument("--sentences", required=True, help="raw source sentences, one per line")
    parser.add_argument("--n", type=int, default=200, help="distinct sentences used")
    parser.add_argument("--concurrency", default="1,8,32,128")
    parser.add_argument("--requests", type=int, default=400, help="requests per level (bound)")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="time per level (bound)")
    parser.add_argument("--max-wait-ms", type=float, default=50.0)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads of the server and the baselines (OMP_NUM_THREADS)",
    )
    parser.add_argument(
        "--shortlist",
        help="a file of `nmt shortlist`: server and baselines search with it (nmt serve --shortlist)",
    )
    parser.add_argument("--json", help="write the tables and the machine here")
    return parser.parse_args()


def baselines(args: argparse.Namespace, sentences: list[str], listed: list[str]) -> dict:
    """Offline (one call), the `nmt translate` command (wall, load included) and one sentence at a
    time (direct): sentences/s, and the direct calls' latencies."""
    import torch

    from nmt.infer.translate import Translator

    torch.set_num_threads(args.threads)
    t = Translator.load(args.checkpoint, device="cpu", precision="fp32", shortlist=args.shortlist)
    t.translate_sentences(sentences[:4])  # warm-up
    start = time.perf_counter()
    t.translate_sentences(sentences, beam=4, alpha=0.6)
    offline = len(sentences) / (time.perf_counter() - start)
    direct = []
    for s in sentences[: min(len(sentences), 100)]:
        start = time.perf_counter()
        t.translate_sentences([s], beam=4, alpha=0.6)
        direct.append(time.perf_counter() - start)
    del t
    src = Path("/tmp") / f"serve_load_{os.getpid()}.txt"
    src.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    command = [sys.executable, "-m", "nmt", "translate", args.checkpoint, "-i", str(src), "-o", os.devnull]
    start = time.perf_counter()
    subprocess.run(
        command + ["--quiet", "--precision", "fp32", *listed],
        check=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    cli = len(sentences) / (time.perf_counter() - start)
    src.unlink()
    return {"offline": offline, "cli": cli, "direct": direct}


def server_levels(args: argparse.Namespace, sentences: list[str], listed: list[str]) -> list[tuple]:
    """(mode, clients, load_level's figures) of `nmt serve` with dynamic batching, then without."""
    rows = []
    for mode, extra in (
        ("dynamic batching", ["--max-wait-ms", str(args.max_wait_ms)]),
        ("batching off", ["--no-batching"]),
    ):
        proc, port = start_server(args.checkpoint, extra + listed)
        try:
            load_level(port, sentences[:8], concurrency=2, requests=8, max_seconds=30)  # warm-up
            for c in (int(c) for c in args.concurrency.split(",")):
                r = load_level(
                    port, sentences, concurrency=c, requests=args.requests, max_seconds=args.max_seconds
                )
                rows.append((mode, c, r))
                print(f"# {mode} c={c}: {r}", file=sys.stderr)
        finally:
            proc.terminate()
            proc.wait(timeout=120)
    return rows


def tables(levels: list[tuple], base: dict) -> tuple[list[list[str]], list[list[str]]]:
    """The server's rows (COLUMNS) and the baselines' rows (BASELINE_COLUMNS), as printed."""
    offline, direct = base["offline"], base["direct"]
    rows = [
        [
            mode,
            str(c),
            str(r["n"]),
            str(r["errors"]),
            f"{r['sent_s']:.1f}",
            f"{r['sent_s'] / offline:.2f}",
            f"{1000 * r['p50']:.0f}",
            f"{1000 * r['p95']:.0f}",
            f"{1000 * r['p99']:.0f}",
        ]
        for mode, c, r in levels
    ]
    base_rows = [
        ["offline `Translator.translate_sentences` (all sentences, one call)", f"{offline:.1f}", ""],
        ["`nmt translate` command (wall, model load included)", f"{base['cli']:.1f}", ""],
        [
            "direct `Translator.translate_sentences([s])`, one at a time",
            f"{1 / statistics.mean(direct):.1f}",
            f"{1000 * percentile(direct, 50):.0f}",
        ],
    ]
    return rows, base_rows


def markdown(columns: list[str], rows: list[list[str]]) -> str:
    return "\n".join(
        ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        + ["| " + " | ".join(r) + " |" for r in rows]
    )


def main() -> None:
    args = parse_args()
    listed = [] if args.shortlist is None else ["--shortlist", args.shortlist]
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # inherited by the server and `nmt translate`
    sentences = [s for s in Path(args.sentences).read_text(encoding="utf-8").splitlines() if s.strip()][
        : args.n
    ]
    base = baselines(args, sentences, listed)
    levels = server_levels(args, sentences, listed)
    rows, base_rows = tables(levels, base)
    what = (
        f"nmt serve under load: {len(sentences)} sentences of {Path(args.sentences).name}, beam 4, one "
        "sentence per request, loopback; the load clients on the same cores"
        + ("" if args.shortlist is None else f", shortlist {Path(args.shortlist).name}")
    )
    print(f"{what}; {args.threads} threads, {os.cpu_count()} CPUs\n")
    print(markdown(COLUMNS, rows) + "\n\n" + markdown(BASELINE_COLUMNS, base_rows))
    c1 = [r for mode, c, r in levels if mode == "dynamic batching" and c == 1]
    if c1:
        print(
            f"\nconcurrency 1, dynamic batching: p50 {1000 * c1[0]['p50']:.0f} ms = "
            f"{c1[0]['p50'] / percentile(base['direct'], 50):.2f}x the direct call"
        )
    if args.json:
        write_table(
            args.json,
            "serve_load",
            what=what,
            precision="fp32",
            model=args.checkpoint,
            columns=COLUMNS,
            rows=rows,
            baselines={"columns": BASELINE_COLUMNS, "rows": base_rows},
        )


if __name__ == "__main__":
    main()
