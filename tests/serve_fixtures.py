"""A small trained checkpoint (about 8 s on one core, once per session: the ``run_dir`` fixture)
and a `nmt serve` subprocess for the tests.

Run as a script (``python tests/serve_fixtures.py serve ...``) it is `nmt` whose model sleeps
$NMT_TEST_STEP_DELAY seconds before every decoding step and writes "nmt-test: encode N" to stderr
for every search batch of N sentences it encodes: a server whose searches are slow for certain,
and whose log shows which requests were searched, for the shutdown tests. While the file
$NMT_TEST_HOLD names exists, a decoding step waits until the server has received a signal: a
search that is certainly in flight when SIGTERM comes.

For the in-process tests: ``make_app`` (the app of `nmt serve tiny=RUN_DIR ...`), ``SteppedModel`` (a
search paused at a chosen decoding step) and the helpers around it."""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nmt.infer.translate import Translator
    from nmt.serve.batcher import Batcher

REPO = Path(__file__).resolve().parents[1]
# tiny corpus words (train_fixtures.WORDS) in sentences the model has seen the like of
SENTENCES = [
    "the dog sees a red ball",
    "a man sits on the street",
    "the small cat plays with the child",
    "a woman runs in the water",
    "the big tree",
    "a blue car on the green street with a dog",
    "the child sees the man",
    "a cat",
    "the woman plays with a ball in the house",
    "a small red car runs on the street with the big blue ball",
    "",
    "the green house",
]
LONG = [s for s in SENTENCES if s]
TRAIN_ARGS = [
    "--preset",
    "tiny",
    "--model.dropout=0",
    "--model.d_model=32",
    "--model.d_ff=64",
    "--model.n_heads=2",
    "--model.d_k=16",
    "--model.d_v=16",
    "--train.precision=fp32",
    "--train.save_every_minutes=0",
    "--train.valid_every_steps=0",
    "--train.warmup_steps=60",
    "--train.num_threads=1",
    "--train.label_smoothing=0",
    "--train.max_steps=300",
    "--train.max_tokens=512",
    "--train.accum_steps=1",
]


def train_small(data: Path, out: Path) -> Path:
    from nmt.cli import main

    assert main(["train", str(data), "--out", str(out), *TRAIN_ARGS]) == 0
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(url: str, body: dict | None = None, *, timeout: float = 60) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode("utf-8")
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def make_app(run_dir, *extra, api_key=None, limits=None, allowed_hosts=None, allowed_origins=()):
    """The app of `nmt serve tiny=RUN_DIR *extra` (the argparse defaults of `nmt serve`) and its models."""
    import argparse

    from nmt.serve.app import create_app
    from nmt.serve.command import add_serve_args, build_models

    parser = argparse.ArgumentParser()
    add_serve_args(parser)
    args = parser.parse_args([f"tiny={run_dir}", *extra])
    models = build_models({"tiny": run_dir}, args)
    app = create_app(
        models, api_key=api_key, limits=limits, allowed_hosts=allowed_hosts, allowed_origins=allowed_origins
    )
    return app, models


class SteppedModel:
    """A model that records its calls and, at decoding step ``pause_at`` (counted from 1 over its
    life), sets ``paused`` and waits for ``resume``: the test decides what happens meanwhile."""

    def __init__(self, model, *, pause_at: int | None = None):
        self.model, self.cfg, self.pause_at = model, model.cfg, pause_at
        self.steps, self.encoded = 0, []
        self.rows: list[int] = []  # the rows of each decoding step (sentences x beam)
        self.paused, self.resume = threading.Event(), threading.Event()

    def encode(self, src_tokens, *args, **kwargs):
        self.encoded.append(src_tokens.size(0))
        return self.model.encode(src_tokens, *args, **kwargs)

    def decode_step(self, tgt_tokens, *args, **kwargs):
        self.steps += 1
        self.rows.append(tgt_tokens.size(0))
        if self.steps == self.pause_at:
            self.paused.set()
            assert self.resume.wait(60), "the test never resumed the search"
        return self.model.decode_step(tgt_tokens, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


def stepped(translator: Translator, **kwargs) -> tuple[Translator, SteppedModel]:
    t = copy.copy(translator)
    t.model = SteppedModel(translator.model, **kwargs)
    return t, t.model


def wait_idle(batcher: Batcher, timeout: float = 30.0) -> None:
    """Until the worker runs nothing and nothing waits (a search still going on shows here)."""
    end = time.monotonic() + timeout
    while batcher._running or batcher.queue_length:
        assert time.monotonic() < end, "the worker is still busy"
        time.sleep(0.01)


def hold_worker(batcher: Batcher) -> tuple[threading.Event, threading.Event]:
    """The batcher's translator made to wait in its next search: (release, entered); ``entered``
    is set when the worker holds a request, ``release`` lets it go on (at most 30 s later)."""
    release, entered = threading.Event(), threading.Event()
    real = batcher.translator.translate_nbest

    def blocking(*args, **kwargs):
        entered.set()
        release.wait(30)
        return real(*args, **kwargs)

    batcher.translator.translate_nbest = blocking
    return release, entered


def texts(results) -> list[list[str]]:
    return [[t.text for t in nbest] for nbest in results]


class Server:
    """`python -m nmt serve ...` on 127.0.0.1 and a free port, waited for until /health answers (with
    ``wait=False``: started only, and waited for by ``wait_until_up``, so that a test does something
    else meanwhile)."""

    def __init__(
        self, *args: str, log: Path, step_delay: float = 0.0, hold: Path | None = None, wait: bool = True
    ):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", NMT_TEST_STEP_DELAY=str(step_delay))
        env["NMT_TEST_HOLD"] = str(hold or "")
        self.log = log
        nmt = [str(Path(__file__).resolve())] if step_delay or hold else ["-m", "nmt"]
        self.proc = subprocess.Popen(
            [sys.executable, *nmt, "serve", *args, "--port", str(self.port)],
            stdout=subprocess.PIPE,
            stderr=open(log, "wb"),
            env=env,
            cwd=REPO,
        )
        if wait:
            self.wait_until_up()

    def wait_until_up(self) -> None:
        log = self.log
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nmt serve exited: {log.read_text()}")
            try:
                if request(self.url + "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"nmt serve did not start: {log.read_text()}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


if __name__ == "__main__":
    from nmt.cli import main
    from nmt.model import Transformer
    from nmt.serve import server

    delay = float(os.environ.get("NMT_TEST_STEP_DELAY") or 0)
    hold = os.environ.get("NMT_TEST_HOLD")
    real_encode, real_step = Transformer.encode, Transformer.decode_step
    real_exit, signalled = server.Server.handle_exit, threading.Event()

    def noted_exit(self, sig, frame) -> None:
        signalled.set()
        real_exit(self, sig, frame)

    def logged_encode(self, src_tokens, *args, **kwargs):
        print(f"nmt-test: encode {src_tokens.size(0)}", file=sys.stderr, flush=True)
        return real_encode(self, src_tokens, *args, **kwargs)

    def slow_step(self, *args, **kwargs):
        time.sleep(delay)
        if hold and os.path.exists(hold):
            signalled.wait()
        return real_step(self, *args, **kwargs)

    Transformer.encode, Transformer.decode_step = logged_encode, slow_step
    server.Server.handle_exit = noted_exit
    sys.exit(main(sys.argv[1:]))
