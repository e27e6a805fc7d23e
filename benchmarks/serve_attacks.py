"""`nmt serve` against hostile input: for each request of a fixed list (the worst cases of the
markup scanner, of LibreTranslate's parameters, idle and slow connections), the time to its answer,
its status, and the longest /health latency while it was being handled (polled every 50 ms).

    python benchmarks/serve_attacks.py RUN [--before DIR] [--json out.json]

``--before DIR``: another checkout (an earlier commit's worktree) whose server goes through the
same list first, its columns beside this checkout's. Each request gets at most ``--cap`` seconds
(a longer one is reported as over it); the server is restarted after a request that left it
unanswering. The idle connections are held HELD_S seconds, then those the server closed counted.
Run alone on the machine and name the CPU next to the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from machine import write_table

REPO = Path(__file__).resolve().parents[1]
HELD_S = 12.0  # how long the idle connections are held before counting those the server closed


@dataclass
class Attack:
    name: str
    path: str = ""
    body: object = None  # a JSON value, or None for the idle-connection attacks
    idle: int = 0  # connections opened before the request that send nothing (or drip: slow)
    drip: bool = False  # the idle connections send one header byte a second


@dataclass
class Row:
    name: str
    status: str
    seconds: float
    health_max_s: float
    note: str = ""


def attacks() -> list[Attack]:
    """The issue's requests, then more worst cases of the scanners (each within nmt's limits)."""
    lt = "/libretranslate/translate"
    q = {"source": "en", "target": "de", "format": "html"}
    return [
        Attack(
            '/translate html: `<b` + 1,600 spaces + `"`',
            "/translate",
            {"text": "<b" + " " * 1600 + '"', "format": "html"},
        ),
        Attack("LibreTranslate html: `<b>` x 20,000 + `x`", lt, {**q, "q": "<b>" * 20000 + "x"}),
        Attack("LibreTranslate html: `<!--` x 50,000", lt, {**q, "q": "<!--" * 50000}),
        Attack(
            "/translate html: `<b>` x 1,000 + x + `</b>` x 1,000",
            "/translate",
            {"text": "<b>" * 1000 + "x" + "</b>" * 1000, "format": "html"},
        ),
        Attack(
            "LibreTranslate `alternatives: Infinity`",
            lt,
            {"q": "a cat", "source": "en", "target": "de", "alternatives": float("inf")},
        ),
        Attack(
            "LibreTranslate `q` with a lone surrogate",
            lt,
            {"q": "a \ud800 cat", "source": "en", "target": "de"},
        ),
        Attack(
            "/translate html: `<!--` x 4,900 (19,600 chars)",
            "/translate",
            {"text": "<!--" * 4900, "format": "html"},
        ),
        Attack(
            '/translate html: `<a ` + `"` x 19,000',
            "/translate",
            {"text": "<a " + '"' * 19000, "format": "html"},
        ),
        Attack(
            "/translate xml: DOCTYPE + `[` x 19,000",
            "/translate",
            {"text": "<!DOCTYPE x " + "[" * 19000, "format": "xml"},
        ),
        Attack(
            "/translate html: `<b>x </b>` x 2,000 (18,000 chars)",
            "/translate",
            {"text": "<b>x </b>" * 2000, "format": "html"},
        ),
        Attack("/translate html: `<i>` x 6,600", "/translate", {"text": "<i>" * 6600, "format": "html"}),
        Attack("260 idle connections, then /translate", "/translate", {"text": "a cat"}, idle=260),
        Attack(
            "260 connections dripping a header byte a second, then /translate",
            "/translate",
            {"text": "a cat"},
            idle=260,
            drip=True,
        ),
    ]


class Server:
    def __init__(self, run: str, source: Path, log: Path, extra: list[str]):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, PYTHONPATH=str(source))
        cmd = [sys.executable, "-m", "nmt", "serve", f"en-de={run}", "--port", str(self.port), *extra]
        self.proc = subprocess.Popen(
            cmd, cwd=source, env=env, stdout=subprocess.DEVNULL, stderr=open(log, "ab")
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nmt serve exited: {log.read_text()[-2000:]}")
            if get(self.url + "/health", 2.0)[0] == 200:
                return
            time.sleep(0.2)
        raise RuntimeError("nmt serve did not start")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def get(url: str, timeout: float) -> tuple[int, float]:
    start = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, time.monotonic() - start
    except urllib.error.HTTPError as e:
        return e.code, time.monotonic() - start
    except OSError:
        return 0, time.monotonic() - start


def post(url: str, body: object, timeout: float) -> tuple[str, float]:
    data = json.dumps(body).encode("utf-8", "surrogatepass")
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    start = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            return str(r.status), time.monotonic() - start
    except urllib.error.HTTPError as e:
        return str(e.code), time.monotonic() - start
    except OSError as e:
        return f"no answer ({type(e).__name__})", time.monotonic() - start


class HealthPoll(threading.Thread):
    """/health every 50 ms while an attack runs; ``worst``: the longest wait for an answer."""

    def __init__(self, url: str, cap: float):
        super().__init__(daemon=True)
        self.url, self.cap, self.worst, self.done = url, cap, 0.0, threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            _, seconds = get(self.url + "/health", self.cap)
            self.worst = max(self.worst, seconds)
            time.sleep(0.05)


def open_idle(port: int, n: int, drip: bool) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        socks.append(s)
    if drip:

        def dripping() -> None:
            for k in range(600):
                for s in socks:
                    try:
                        s.send(b"GET / HTTP/1.1\r\nHost: x\r\n"[k % 26 : k % 26 + 1])
                    except OSError:
                        pass
                time.sleep(1.0)

        threading.Thread(target=dripping, daemon=True).start()
    return socks


def run_attack(server: Server, attack: Attack, cap: float) -> Row:
    socks = open_idle(server.port, attack.idle, attack.drip) if attack.idle else []
    if socks:
        time.sleep(2.0)  # the connections held open before the request
    poll = HealthPoll(server.url, cap)
    poll.start()
    status, seconds = post(server.url + attack.path, attack.body, cap)
    poll.done.set()
    poll.join(cap + 1)
    note = ""
    if socks:  # nmt serve's --read-timeout is 10 s by default
        time.sleep(max(0.0, HELD_S - 2.0 - seconds))
        closed = sum(1 for s in socks if closed_by_server(s))
        note = f"{closed} of {len(socks)} closed by the server within {HELD_S:g} s"
        for s in socks:
            s.close()
    return Row(attack.name, status, round(seconds, 3), round(poll.worst, 3), note)


def closed_by_server(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def run_all(run: str, source: Path, args: argparse.Namespace) -> list[Row]:
    """Every attack against a server of ``source``'s code (a fresh one after any that left it
    unanswering)."""
    log = Path(args.json or "serve_attacks").with_suffix(".serve.log")
    server = Server(run, source, log, args.serve_args.split())
    rows = []
    try:
        for attack in attacks():
            row = run_attack(server, attack, args.cap)
            rows.append(row)
            print(
                f"{source.name}: {row.name}: {row.status} in {row.seconds:.2f} s, "
                f"/health <= {row.health_max_s:.2f} s {row.note}",
                flush=True,
            )
            if get(server.url + "/health", 5.0)[0] != 200:
                server.stop()
                server = Server(run, source, log, args.serve_args.split())
    finally:
        server.stop()
    return rows


def git(source: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=source, capture_output=True, text=True).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run", help="the checkpoint or run directory served as en-de")
    parser.add_argument(
        "--before", default=None, help="another checkout (an earlier commit) run first, side by side"
    )
    parser.add_argument("--cap", type=float, default=60.0, help="seconds a request may take (default 60)")
    parser.add_argument("--serve-args", default="", help="more `nmt serve` options (one string)")
    parser.add_argument("--model-note", default="", help="what the model is, for the JSON")
    parser.add_argument("--json", default=None, help="the table with its CPU, commits and command")
    args = parser.parse_args()
    runs = ([("before", Path(args.before))] if args.before else []) + [("after", REPO)]
    run = str(Path(args.run).resolve())
    results = {label: run_all(run, source, args) for label, source in runs}
    columns = ["request"]
    for label in results:
        columns += [f"{label}: status", f"{label}: answered (s)", f"{label}: longest /health wait (s)"]
    rows = []
    for k, attack in enumerate(attacks()):
        row = [attack.name.replace("|", "\\|")]
        for label in results:
            r = results[label][k]
            row += [
                r.status + (f" ({r.note})" if r.note else ""),
                f"{r.seconds:.2f}",
                f"{r.health_max_s:.2f}",
            ]
        rows.append(row)
    print("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    print("\n".join("| " + " | ".join(r) + " |" for r in rows))
    if args.json:
        write_table(
            args.json,
            "serve_attacks",
            what="nmt serve against hostile requests: each request's status and time to answer, and the "
            "longest wait for /health (polled every 50 ms) while it was handled",
            model=args.model_note,
            before_commit=git(Path(args.before), "rev-parse", "--short", "HEAD") if args.before else None,
            columns=columns,
            rows=rows,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
