"""`nmt serve` under hostile clients and on bad days: fair scheduling between the steps
of a long search, cancellation (client gone, --timeout), work budgets, body/Host/Content-Type
checks, JSON errors from the worker, /health that notices a dead or stuck worker, truncation
warnings, and SIGTERM that gives up on orphaned work. No test depends on speed: a search is
paused at a chosen decoding step (SteppedModel) where the order of events matters."""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("fastapi", reason="nmt[serve] not installed (pip install 'nmt[serve]')")
from fastapi.testclient import TestClient  # noqa: E402
from serve_fixtures import SENTENCES, Server, request  # noqa: E402

from nmt.infer.options import SearchOptions  # noqa: E402
from nmt.infer.translate import Translator  # noqa: E402
from nmt.serve.app import Limits, create_app  # noqa: E402
from nmt.serve.batcher import Batcher, JobOptions, QueueFull  # noqa: E402
from nmt.serve.command import add_serve_args, build_models  # noqa: E402

LONG = [s for s in SENTENCES if s]


@pytest.fixture(scope="module")
def translator(run_dir) -> Translator:
    return Translator.load(run_dir, device="cpu", precision="fp32")


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


def make_app(run_dir, *extra, limits=None, allowed_hosts=None):
    parser = argparse.ArgumentParser()
    add_serve_args(parser)
    args = parser.parse_args([f"tiny={run_dir}", *extra])
    models = build_models({"tiny": run_dir}, args)
    return create_app(models, limits=limits, allowed_hosts=allowed_hosts), models


def texts(results) -> list[list[str]]:
    return [[t.text for t in nbest] for nbest in results]


# ----------------------------------------------------------------------------------- scheduling
def test_a_short_request_runs_between_the_steps_of_a_long_one(translator):
    """While a long search (11 sentences, beam 32) is at its 3rd step, another long request
    (beam 31) and then a one-sentence greedy request come: the short one is answered first, between
    two steps of the running search; the other long one waits its turn (it does not run inside the
    first). Every translation is the one each request gets alone."""
    t, model = stepped(translator, pause_at=3)
    batcher = Batcher(t, max_wait_ms=0, slice_ms=0)
    done = []

    async def scenario():
        long = batcher.submit(LONG, JobOptions(SearchOptions(beam=32, alpha=0.6, nbest=2)))
        long.add_done_callback(lambda f: done.append("long"))
        assert await asyncio.to_thread(model.paused.wait, 60)
        other = batcher.submit(LONG, JobOptions(SearchOptions(beam=31, alpha=0.6, nbest=1)))
        other.add_done_callback(lambda f: done.append("other long"))
        short = batcher.submit([SENTENCES[0]], JobOptions(SearchOptions(beam=1, alpha=0.0, nbest=1)))
        short.add_done_callback(lambda f: done.append("short"))
        model.resume.set()
        return await long, await other, await short

    batcher.start()
    try:
        long, other, short = asyncio.run(scenario())
    finally:
        batcher.stop()
    assert done == ["short", "long", "other long"]
    assert texts(long) == texts(translator.translate_nbest(LONG, beam=32, alpha=0.6, nbest=2))
    assert texts(other) == texts(translator.translate_nbest(LONG, beam=31, alpha=0.6))
    assert texts(short) == texts(translator.translate_nbest([SENTENCES[0]], beam=1, alpha=0.0))


def test_cancelled_requests_are_dropped_from_the_queue_or_their_search_abandoned(translator):
    """A queued request whose future is cancelled is never searched; a running search whose only
    request is cancelled stops at its next step; the worker then serves the next request."""
    t, model = stepped(translator, pause_at=2)
    batcher = Batcher(t, max_wait_ms=0)

    async def scenario():
        running = batcher.submit(LONG, JobOptions(SearchOptions(beam=4, alpha=0.6, nbest=1)))
        assert await asyncio.to_thread(model.paused.wait, 60)
        queued = batcher.submit(["the green house"], JobOptions(SearchOptions(beam=5, alpha=0.6, nbest=1)))
        assert batcher.queue_length == 1
        queued.cancel()
        await asyncio.sleep(0)  # the futures' done callbacks run
        assert batcher.queue_length == 0 and batcher.queue_work == 0
        running.cancel()
        await asyncio.sleep(0)
        model.resume.set()
        return await batcher.submit([SENTENCES[1]], JobOptions(SearchOptions(beam=1, alpha=0.0, nbest=1)))

    batcher.start()
    try:
        after = asyncio.run(scenario())
    finally:
        batcher.stop()
    assert model.encoded == [len(LONG), 1]  # the cancelled queued request was never encoded
    steps_alone = SteppedModel(translator.model)
    alone = copy.copy(translator)
    alone.model = steps_alone
    assert texts(after) == texts(alone.translate_nbest([SENTENCES[1]], beam=1, alpha=0.0))
    assert model.steps == 2 + steps_alone.steps  # the long search stopped after its 2nd step


def test_deadline_is_504_json_and_the_work_is_cancelled(run_dir, translator):
    app, models = make_app(run_dir, limits=Limits(timeout=0.5))
    t, model = stepped(translator, pause_at=1)
    models["tiny"].batcher.translator = t
    with TestClient(app) as c:
        r = c.post("/translate", json={"text": LONG, "beam": 4})
        assert r.status_code == 504
        assert r.json() == {
            "error": {
                "status": 504,
                "message": "no answer within 0.5 s (--timeout); the request was cancelled",
            }
        }
        model.resume.set()  # the search wakes up after its 504, inside its first decoding step
        r = c.post("/translate", json={"text": SENTENCES[0], "beam": 1})
        assert r.status_code == 200
        wait_idle(models["tiny"].batcher)  # a search that went on would be running or done by now
        assert model.encoded == [len(LONG), 1]
        # the timed-out search (len(LONG) sentences: >= 2 rows a step, 4 per sentence after the
        # first) made no step after the one it was paused in; the later request's steps have 1 row
        assert len(LONG) >= 2 and sum(rows > 1 for rows in model.rows) == 1, model.rows
        assert model.rows[1:] and set(model.rows[1:]) == {1}
        assert 'nmt_errors_total{status="504"} 1.0' in c.get("/metrics").text


def test_a_client_that_disconnects_takes_its_queued_request_with_it(run_dir, translator):
    """ASGI: the client of a queued request disconnects: the request leaves the queue at once
    and /metrics counts it as 499."""
    app, models = make_app(run_dir)
    batcher = models["tiny"].batcher
    t, model = stepped(translator, pause_at=1)
    batcher.translator = t

    async def call(body: dict, disconnect: asyncio.Event) -> list[dict]:
        messages = [{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}]
        sent = []

        async def receive():
            if messages:
                return messages.pop(0)
            await disconnect.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/translate",
            "raw_path": b"/translate",
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"testserver"), (b"content-type", b"application/json")],
            "client": ("127.0.0.1", 5000),
            "server": ("testserver", 80),
        }
        await app(scope, receive, send)
        return sent

    async def scenario():
        stays, leaves = asyncio.Event(), asyncio.Event()
        first = asyncio.ensure_future(call({"text": SENTENCES[0], "beam": 2}, stays))
        assert await asyncio.to_thread(model.paused.wait, 60)  # the worker is inside the first search
        second = asyncio.ensure_future(call({"text": SENTENCES[1], "beam": 3}, leaves))
        while batcher.queue_length == 0:
            await asyncio.sleep(0.01)
        leaves.set()
        await asyncio.wait_for(second, 30)
        await asyncio.sleep(0)  # the future's done callback runs
        queued_after = batcher.queue_length
        model.resume.set()
        sent = await asyncio.wait_for(first, 60)
        stays.set()
        return queued_after, sent

    batcher.start()
    try:
        # the app's lifespan is not run here: its middleware stack is built on the first call
        queued_after, sent = asyncio.run(scenario())
    finally:
        batcher.stop()
    assert queued_after == 0
    assert sent[0]["status"] == 200
    assert model.encoded == [1]  # the second sentence was never searched
    metrics = TestClient(app).get("/metrics").text
    assert 'nmt_requests_total{endpoint="/translate",status="499"} 1.0' in metrics


# ----------------------------------------------------------------------------------- budgets
def test_work_budgets_per_request_and_per_queue(run_dir, translator):
    app, models = make_app(run_dir, limits=Limits(max_request_work=50))
    n = sum(models["tiny"].batcher.measure([SENTENCES[0]]).tokens)  # pieces + EOS
    with TestClient(app) as c:
        r = c.post("/translate", json={"text": SENTENCES[0], "beam": 32})
        assert r.status_code == 413
        assert r.json()["error"]["message"] == (
            f"{n} source pieces x beam 32 = {n * 32:,}: at most 50 per request (--max-request-work)"
        )
    app, models = make_app(run_dir, "--max-queue-work", "40")
    batcher = models["tiny"].batcher
    t, model = stepped(translator, pause_at=1)
    batcher.translator = t
    with TestClient(app) as c, ThreadPoolExecutor(2) as pool:
        first = pool.submit(c.post, "/translate", json={"text": SENTENCES[0], "beam": 1})
        assert model.paused.wait(60)
        second = pool.submit(c.post, "/translate", json={"text": SENTENCES[1], "beam": 2})
        while batcher.queue_length == 0:
            time.sleep(0.01)
        queued = batcher.queue_work
        assert queued > 20
        r = c.post("/translate", json={"text": SENTENCES[3], "beam": 2})
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert f"{queued:,} pieces x beam are waiting" in r.json()["error"]["message"]
        assert "(--max-queue-work 40)" in r.json()["error"]["message"]
        model.resume.set()
        assert first.result().status_code == second.result().status_code == 200
    with pytest.raises(QueueFull):
        asyncio.run(_submit_twice(Batcher(translator, max_queue_work=10)))


async def _submit_twice(batcher: Batcher) -> None:
    batcher.submit(
        [SENTENCES[0]], JobOptions(SearchOptions(beam=4, alpha=0.6, nbest=1))
    )  # the worker is not started: it waits
    batcher.submit([SENTENCES[1]], JobOptions(SearchOptions(beam=4, alpha=0.6, nbest=1)))


def test_alignment_is_computed_for_the_returned_translation_only(run_dir, monkeypatch):
    import nmt.infer.attention_maps as attention_maps

    calls = []
    real = attention_maps.align
    monkeypatch.setattr(attention_maps, "align", lambda *a: calls.append(1) or real(*a))
    app, _ = make_app(run_dir)
    with TestClient(app) as c:
        r = c.post("/translate", json={"text": SENTENCES[:3], "beam": 4, "nbest": 3, "alignment": True})
    assert r.status_code == 200 and all("alignment" in t for t in r.json()["translations"])
    assert len(calls) == 3


def test_attention_is_bounded_and_rendered_off_the_event_loop(run_dir, monkeypatch):
    app, _ = make_app(run_dir, limits=Limits(max_attention_cells=2000))
    with TestClient(app) as c:
        r = c.post("/attention", json={"text": SENTENCES[5]})
        assert (
            r.status_code == 413
            and "(--max-attention-cells); send a shorter sentence" in r.json()["error"]["message"]
        )
    real, on_loop = json.dumps, []

    def dumps(obj, *args, **kwargs):
        if isinstance(obj, dict) and "cross" in obj:
            try:
                asyncio.get_running_loop()
                on_loop.append(True)
            except RuntimeError:
                on_loop.append(False)
        return real(obj, *args, **kwargs)

    monkeypatch.setattr(json, "dumps", dumps)
    app, _ = make_app(run_dir)
    with TestClient(app) as c:
        r = c.post("/attention", json={"text": SENTENCES[1]})
    assert r.status_code == 200 and len(r.json()["cross"]) == 2
    assert on_loop == [False]


# ----------------------------------------------------------------------------------- HTTP hygiene
def test_body_size_nesting_content_type_host_and_paths(run_dir):
    app, _ = make_app(
        run_dir, limits=Limits(max_body_bytes=1000), allowed_hosts=("localhost", "127.0.0.1", "::1")
    )
    with TestClient(app, base_url="http://localhost:8000", raise_server_exceptions=False) as c:
        big = json.dumps({"text": "a dog " * 300}).encode()
        r = c.post("/translate", content=big, headers={"Content-Type": "application/json"})
        assert (
            r.status_code == 413
            and r.json()["error"]["message"]
            == f"request body of {len(big):,} bytes: at most 1,000 (--max-body-bytes)"
        )
        r = c.post(
            "/translate", content=iter([big[:600], big[600:]]), headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 413
        assert r.json()["error"]["message"] == "request body over 1,000 bytes (--max-body-bytes)"
        r = c.post(
            "/translate", content=json.dumps({"text": "a dog"}), headers={"Content-Type": "text/plain"}
        )
        assert (
            r.status_code == 415
            and r.json()["error"]["message"]
            == "Content-Type 'text/plain': send the request as application/json"
        )
        for host in ("evil.example", "evil.example:8000"):
            r = c.get("/health", headers={"Host": host})
            assert r.status_code == 400 and r.json()["error"]["message"].startswith(
                f"Host {host!r} is not served"
            )
        for host in ("localhost:8000", "127.0.0.1", "[::1]:8000"):
            assert c.get("/health", headers={"Host": host}).status_code == 200
        assert c.get("/models").json()["models"][0]["checkpoint"] == run_dir.name
    app, _ = make_app(run_dir)
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.post("/translate", content=b"[" * 100_000, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["message"] == "request body is nested too deeply"
        r = c.post(
            "/translate", content=b'{"text": "a \\ud800 dog"}', headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 422 and "lone surrogate" in r.json()["error"]["message"]


def test_a_failure_in_the_worker_is_a_counted_json_500(run_dir, capsys):
    app, models = make_app(run_dir)

    def boom(*args, **kwargs):
        raise RuntimeError("out of memory in the search")

    models["tiny"].batcher.translator.translate_nbest = boom
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.post("/translate", json={"text": SENTENCES[0]})
        assert r.status_code == 500
        assert r.json() == {
            "error": {
                "status": 500,
                "message": "model 'tiny' failed: RuntimeError: out of memory in the search",
            }
        }
        metrics = c.get("/metrics").text
        assert 'nmt_errors_total{status="500"} 1.0' in metrics
        assert 'nmt_requests_total{endpoint="/translate",status="500"} 1.0' in metrics
        assert c.get("/health").status_code == 200  # one failed request is not a dead worker
    assert "RuntimeError: out of memory in the search" in capsys.readouterr().err


def test_health_notices_a_stuck_or_dead_worker(run_dir, translator):
    app, models = make_app(run_dir, limits=Limits(timeout=0.3))
    t, model = stepped(translator, pause_at=1)
    models["tiny"].batcher.translator = t
    with TestClient(app) as c, ThreadPoolExecutor(1) as pool:
        assert c.get("/health").status_code == 200
        stuck = pool.submit(c.post, "/translate", json={"text": SENTENCES[0]})
        assert model.paused.wait(60)
        time.sleep(0.6)  # the worker is held in one step: no progress for longer than 0.3 s
        r = c.get("/health")
        assert r.status_code == 503 and r.json()["error"]["message"].startswith(
            "model 'tiny': no progress for"
        )
        assert stuck.result().status_code == 504
        model.resume.set()
        c.post("/translate", json={"text": SENTENCES[1], "beam": 1})
        assert c.get("/health").status_code == 200

    app, models = make_app(run_dir)

    def die(*args, **kwargs):
        raise SystemExit("killed")

    models["tiny"].batcher.translator.translate_nbest = die
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.post("/translate", json={"text": SENTENCES[0]})
        assert (
            r.status_code == 500
            and "the worker thread died (SystemExit: killed)" in r.json()["error"]["message"]
        )
        r = c.get("/health")
        assert r.status_code == 503
        assert r.json()["error"]["message"] == "model 'tiny': the worker thread died (SystemExit: killed)"
        r = c.post("/translate", json={"text": SENTENCES[0]})
        assert r.status_code == 503 and "the worker is not running" in r.json()["error"]["message"]


def test_a_truncated_sentence_is_reported(run_dir, translator):
    app, _ = make_app(run_dir)
    long = " ".join(["the small red car"] * 120)
    n = len(translator.sp.encode(long))
    assert n > 255
    with TestClient(app) as c:
        # one sentence per text (split and recase off): the plain path's warning
        plain = {"split": False, "recase": False, "max_words": 0}
        r = c.post("/translate", json={"text": [SENTENCES[0], long], "beam": 1, **plain})
        assert r.status_code == 200
        assert r.json()["warnings"] == [
            f"sentence 2: {n:,} pieces, truncated to 255 (model.max_positions=256)"
        ]
        # real text (the default) with max_words 0: truncated, not cut into parts; by text
        r = c.post("/translate", json={"text": [SENTENCES[0], long], "beam": 1, "max_words": 0})
        assert r.status_code == 200
        assert r.json()["warnings"] == [f"text 2: {n:,} pieces, truncated to 255 (model.max_positions=256)"]
        assert "warnings" not in c.post("/translate", json={"text": SENTENCES[0], "beam": 1}).json()
        r = c.post("/attention", json={"text": long, "beam": 1})
        assert r.status_code == 200 and r.json()["warnings"] == [
            f"sentence 1: {n:,} pieces, truncated to 255 (model.max_positions=256)"
        ]
        assert "warnings" not in c.post("/attention", json={"text": SENTENCES[0], "beam": 1}).json()


# ----------------------------------------------------------------------------------- shutdown
def long_requests(server: Server, n: int) -> list:
    """``n`` requests with different beams (so never one batch), sent from threads; returns the
    futures of their (status, body) or the error their client saw."""

    def send(beam: int):
        try:
            return request(server.url + "/translate", {"text": LONG, "beam": beam}, timeout=120)
        except Exception as e:  # noqa: BLE001  (the connection closed without an answer)
            return e

    pool = ThreadPoolExecutor(n)
    futures = [pool.submit(send, 4 + i) for i in range(n)]
    pool.shutdown(wait=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until the worker holds one and the others wait
        metrics = urllib_get(server.url + "/metrics")
        waiting = [
            line for line in metrics.splitlines() if line.startswith('nmt_queue_sentences{model="tiny"}')
        ]
        if waiting and float(waiting[0].split()[-1]) >= (n - 1) * len(LONG):
            return futures
        time.sleep(0.1)
    raise AssertionError("the requests were not queued")


def urllib_get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read().decode()


def test_sigterm_gives_up_orphaned_work_after_the_grace_and_a_second_signal_stops_at_once(run_dir, tmp_path):
    """Searches made slow (0.5 s per decoding step; the log names each search): one request runs,
    three wait. SIGTERM with --shutdown-grace 1: the server exits (status 0) without searching the
    three waiting requests, whose clients it has given up. A new server, SIGTERM with a 60 s grace,
    then a second SIGTERM: it stops at once (status 1)."""
    log = tmp_path / "a.log"
    server = Server(f"tiny={run_dir}", "--shutdown-grace", "1", log=log, step_delay=0.5)
    try:
        futures = long_requests(server, 4)
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=60) == 0
        assert [f.result(timeout=60)[0] for f in futures if isinstance(f.result(timeout=60), tuple)] == []
        assert log.read_text().count("nmt-test: encode") == 1  # the running search only
    finally:
        server.stop()
    log = tmp_path / "b.log"
    server = Server(f"tiny={run_dir}", "--shutdown-grace", "60", log=log, step_delay=0.5)
    try:
        long_requests(server, 4)
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(1)
        assert server.proc.poll() is None  # the first signal waits for the requests in flight
        start = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=60) == 1
        assert time.monotonic() - start < 20
        assert "stopped at once (second signal)" in log.read_text()
        assert log.read_text().count("nmt-test: encode") == 1
    finally:
        server.stop()
