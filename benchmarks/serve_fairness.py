"""Fairness of `nmt serve` under one client's maximal requests: the median latency of short
one-sentence requests from several clients, idle and while one client sends long requests.

    flock /tmp/nmt-bench.lock python benchmarks/serve_fairness.py runs/demo/average \
        --sentences runs/demo/data/test.en.txt

Phase 1 (idle): --short-clients clients, each on its own kept-alive connection, send one short
sentence per request (beam 4, alpha 0.6) in a loop for --idle-seconds. Phase 2 (loaded): the same,
for --load-seconds, while --heavy-threads threads of one other client send, again and again,
requests of --heavy-sentences long sentences of about --heavy-pieces SentencePiece pieces each
(test sentences joined) with beam --heavy-beam: by default 8 x 255 pieces (+ EOS) x beam 32 =
65,536 pieces x beam, the largest request the server's default --max-request-work accepts. The
server runs as a subprocess on 127.0.0.1 with --threads torch threads. Prints a markdown table:
median (p50) and p90 latency of the short requests in each phase, their ratio, and what became of
the heavy requests (answered, 504, 503, 413). The loaded phase's requests are those sent after
the heavy client's first request (it starts --heavy-lead seconds before them).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shlex
import statistics
import threading
import time
from collections import Counter
from pathlib import Path

from machine import cpu_name
from serve_load import start_server

REPO = Path(__file__).resolve().parents[1]


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s)) - 1))] if s else float("nan")


def long_sentences(sentences: list[str], sp, *, pieces: int, n: int) -> list[str]:
    """``n`` sentences of about ``pieces`` pieces each: test sentences joined by spaces."""
    out, i = [], 0
    for _ in range(n):
        words: list[str] = []
        while True:
            candidate = words + sentences[i % len(sentences)].split()
            i += 1
            if len(sp.encode(" ".join(candidate))) > pieces:
                break
            words = candidate
        for w in sentences[i % len(sentences)].split():  # fill up word by word
            if len(sp.encode(" ".join(words + [w]))) > pieces:
                break
            words.append(w)
        out.append(" ".join(words))
    return out


class Client(threading.Thread):
    """Sends ``body`` (a function of the request number) in a loop until ``stop`` is set; records
    (send time, latency, status)."""

    def __init__(self, port: int, body, stop: threading.Event, *, timeout: float):
        super().__init__(daemon=True)
        self.port, self.body, self.stop, self.timeout = port, body, stop, timeout
        self.records: list[tuple[float, float, int]] = []

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        i = 0
        while not self.stop.is_set():
            payload = json.dumps(self.body(i))
            i += 1
            start = time.perf_counter()
            try:
                conn.request("POST", "/translate", payload, {"Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                status = response.status
            except OSError:  # timed out or closed: a new connection next time
                status = 0
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            self.records.append((start, time.perf_counter() - start, status))


def short_phase(
    port: int, sentences: list[str], *, clients: int, seconds: float
) -> list[tuple[float, float, int]]:
    stop = threading.Event()
    threads = [
        Client(
            port,
            lambda i, c=c: {"text": sentences[(7 * c + i) % len(sentences)], "beam": 4, "alpha": 0.6},
            stop,
            timeout=600,
        )
        for c in range(clients)
    ]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    return [r for t in threads for r in t.records]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("checkpoint")
    parser.add_argument("--sentences", required=True, help="raw source sentences, one per line")
    parser.add_argument("--short-clients", type=int, default=4)
    parser.add_argument("--heavy-threads", type=int, default=4)
    parser.add_argument("--heavy-sentences", type=int, default=8)
    parser.add_argument(
        "--heavy-pieces", type=int, default=255, help="pieces per long sentence (EOS not counted)"
    )
    parser.add_argument("--heavy-beam", type=int, default=32)
    parser.add_argument(
        "--heavy-lead", type=float, default=3.0, help="seconds the heavy client runs alone first"
    )
    parser.add_argument("--idle-seconds", type=float, default=15.0)
    parser.add_argument("--load-seconds", type=float, default=40.0)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads of the server (OMP_NUM_THREADS)"
    )
    parser.add_argument(
        "--repo",
        default=str(REPO),
        help="the nmt checkout whose server is measured (e.g. a `git worktree` of an older commit)",
    )
    parser.add_argument("--label", default="", help="a name for this server in the table")
    parser.add_argument("--serve-args", default="", help="extra `nmt serve` arguments, in one string")
    args = parser.parse_args()
    extra = shlex.split(args.serve_args)
    sentences = [s for s in Path(args.sentences).read_text(encoding="utf-8").splitlines() if s.strip()]
    short = [s for s in sentences if len(s.split()) <= 15][:200]

    from nmt.checkpoint import resolve_checkpoint
    from nmt.vocab import load_spm

    sp = load_spm(resolve_checkpoint(Path(args.checkpoint)))
    heavy = long_sentences(sentences, sp, pieces=args.heavy_pieces, n=args.heavy_sentences)
    heavy_pieces = [len(sp.encode(s)) + 1 for s in heavy]
    work = sum(heavy_pieces) * args.heavy_beam
    proc, port = start_server(args.checkpoint, extra, threads=args.threads, cwd=Path(args.repo))
    try:
        short_phase(port, short, clients=args.short_clients, seconds=2)  # warm-up
        idle = short_phase(port, short, clients=args.short_clients, seconds=args.idle_seconds)
        stop = threading.Event()
        heavies = [
            Client(port, lambda i: {"text": heavy, "beam": args.heavy_beam}, stop, timeout=900)
            for _ in range(args.heavy_threads)
        ]
        loaded_from = time.perf_counter()
        for t in heavies:
            t.start()
        time.sleep(args.heavy_lead)
        loaded = short_phase(port, short, clients=args.short_clients, seconds=args.load_seconds)
        stop.set()
        heavy_records = [r for t in heavies for r in t.records]  # those answered so far
    finally:
        proc.kill()  # the heavy requests still running are not waited for
        proc.wait()
    idle_ok = [lat for _, lat, status in idle if status == 200]
    loaded_ok = [lat for start, lat, status in loaded if status == 200 and start >= loaded_from]
    loaded_status = Counter(status for _, _, status in loaded)
    heavy_status = Counter(status for _, _, status in heavy_records)
    p50_idle, p50_loaded = (
        statistics.median(idle_ok),
        statistics.median(loaded_ok) if loaded_ok else float("nan"),
    )
    label = args.label or f"nmt serve {' '.join(extra)}".strip()
    print(
        f"{cpu_name()}, {os.cpu_count()} CPUs, server torch threads {args.threads}; "
        f"{args.short_clients} short "
        f"clients (beam 4, one sentence of <= 15 words); heavy client: {args.heavy_threads} threads x "
        f"{args.heavy_sentences} sentences of {min(heavy_pieces)}-{max(heavy_pieces)} pieces (EOS "
        "incl.), beam "
        f"{args.heavy_beam} = {work:,} pieces x beam per request\n"
    )
    print(
        "| server | short p50 idle ms | p90 idle | short p50 loaded ms | p90 loaded | loaded / idle (p50) | "
        "short answered idle / loaded (other statuses) | heavy answered in the loaded phase (statuses) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    others = {k: v for k, v in loaded_status.items() if k != 200}
    print(
        f"| {label} | {1000 * p50_idle:.0f} | {1000 * percentile(idle_ok, 90):.0f} | "
        f"{1000 * p50_loaded:.0f} | "
        f"{1000 * percentile(loaded_ok, 90):.0f} | {p50_loaded / p50_idle:.2f}x | {len(idle_ok)} / "
        f"{len(loaded_ok)} {dict(others) if others else ''} | {sum(heavy_status.values())} "
        f"{dict(heavy_status)} |"
    )


if __name__ == "__main__":
    main()
