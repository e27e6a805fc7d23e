"""nmt/serve/batcher.py: the queue, dynamic batching that never changes a translation, fair scheduling
between the steps of a long search, cancellation (client gone, --timeout), work budgets, a full queue,
a stopping server or a dead or stuck worker. No test depends on speed: a search is paused at a chosen
decoding step (serve_fixtures.SteppedModel) where the order of events matters."""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import pytest

pytest.importorskip("fastapi", reason="nmt[serve] not installed (pip install 'nmt[serve]')")
from fastapi.testclient import TestClient  # noqa: E402
from serve_fixtures import (  # noqa: E402
    LONG,
    SENTENCES,
    SteppedModel,
    hold_worker,
    make_app,
    stepped,
    texts,
    wait_idle,
)

from nmt.cli import main  # noqa: E402
from nmt.infer.options import SearchOptions  # noqa: E402
from nmt.infer.translate import Translator  # noqa: E402
from nmt.serve.app import Limits  # noqa: E402
from nmt.serve.batcher import Batcher, JobOptions, QueueFull  # noqa: E402


async def _submit_twice(batcher: Batcher) -> None:
    batcher.submit(
        [SENTENCES[0]], JobOptions(SearchOptions(beam=4, alpha=0.6, nbest=1))
    )  # the worker is not started: it waits
    batcher.submit([SENTENCES[1]], JobOptions(SearchOptions(beam=4, alpha=0.6, nbest=1)))


# the search alone: no scoring pass after it, no retry (the tests count its model calls)
RAW = {"guards": False, "confidence": False}


def test_queue_full_is_503_with_retry_after(run_dir):
    app, models = make_app(run_dir, "--max-queue", "1")
    batcher = models["tiny"].batcher
    release, entered = hold_worker(batcher)
    with TestClient(app) as c, ThreadPoolExecutor(2) as pool:
        first = pool.submit(c.post, "/translate", json={"text": "a dog", "beam": 1})
        assert entered.wait(30)  # the worker holds the first request
        second = pool.submit(c.post, "/translate", json={"text": "a cat", "beam": 1})
        deadline = time.monotonic() + 30
        while batcher.queue_length < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        r = c.post("/translate", json={"text": "the tree", "beam": 1})
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert "queue full" in r.json()["error"]["message"]
        release.set()
        assert first.result().status_code == second.result().status_code == 200


def test_batching_never_changes_a_translation(run_dir_translator):
    sizes = []
    batcher = Batcher(run_dir_translator, max_batch_tokens=4096, max_wait_ms=300, on_batch=sizes.append)
    sentences = [s for s in SENTENCES if s] * 2

    async def all_at_once():
        futures = [
            batcher.submit([s], JobOptions(SearchOptions(beam=4, alpha=0.6, nbest=2))) for s in sentences
        ]
        batcher.start()  # all are queued before the worker looks: it cannot take the first alone
        return await asyncio.gather(*futures)

    try:
        batched = asyncio.run(all_at_once())
    finally:
        batcher.stop()
    assert max(sizes) > 1  # the worker did combine requests
    for s, got in zip(sentences, batched):
        alone = run_dir_translator.translate_nbest([s], beam=4, alpha=0.6, nbest=2)[0]
        assert [(t.text, t.tokens) for t in got[0]] == [(t.text, t.tokens) for t in alone]
        assert [t.score for t in got[0]] == pytest.approx([t.score for t in alone], abs=1e-5)


def test_a_batch_is_scored_in_one_pass_with_the_scores_each_request_gets_alone(run_dir_translator):
    """The teacher-forced pass after a batch's search (confidences, and the coverage the omission
    guard reads) runs once over every request of the batch, not once per request (and the omission
    check's deletions once more), and gives each translation the log-probabilities, coverage and
    word drops it gets when scored alone."""
    from nmt.realtext.quality import score_results

    calls: list[int] = []
    counted = copy.copy(run_dir_translator)
    counted.forced_scores = lambda sources, outputs, **kw: (
        calls.append(len(sources)) or run_dir_translator.forced_scores(sources, outputs, **kw)
    )
    batcher = Batcher(counted, max_batch_tokens=4096, max_wait_ms=300)
    sentences = [s for s in SENTENCES if s]
    options = JobOptions(SearchOptions(beam=4, alpha=0.6, nbest=2), scores=True, coverage=True)

    async def all_at_once():
        futures = [batcher.submit([s], options) for s in sentences]
        batcher.start()  # all are queued before the worker looks: one batch
        return await asyncio.gather(*futures)

    try:
        batched = asyncio.run(all_at_once())
    finally:
        batcher.stop()
    # one pass over every request's 2-best, and at most one over the omission check's sources
    assert calls[0] == 2 * len(sentences) and len(calls) <= 2
    for s, got in zip(sentences, batched):
        alone = run_dir_translator.translate_nbest([s], beam=4, alpha=0.6, nbest=2)
        score_results(run_dir_translator, [s], alone, coverage=True)
        for mine, own in zip(got[0], alone[0]):
            assert mine.tokens == own.tokens
            assert mine.log_probs == pytest.approx(own.log_probs, abs=1e-4)
            assert mine.coverage == pytest.approx(own.coverage, abs=1e-4)
            assert mine.word_drops == pytest.approx(own.word_drops, abs=1e-3)


def test_with_a_shortlist_batching_never_changes_a_translation(run_dir, tiny_data, tmp_path):
    """A shortlist's search in a batch of several requests scores each request's own union of
    target pieces (union_groups), so the requests still share a batch and every answer is the one
    the request gets alone (the union of a whole batch would change translations: 7 of 11 differed)."""
    path = tmp_path / "s.txt"
    assert main(["shortlist", str(tiny_data), "--out", str(path), "--best", "2", "--frequent", "5"]) == 0
    shortlisted = Translator.load(run_dir, device="cpu", precision="fp32", shortlist=path)
    sizes: list[int] = []
    batcher = Batcher(shortlisted, max_batch_tokens=4096, max_wait_ms=300, on_batch=sizes.append)
    sentences = [s for s in SENTENCES if s]

    async def all_at_once():
        futures = [
            batcher.submit([s], JobOptions(SearchOptions(beam=4, alpha=0.6, nbest=1))) for s in sentences
        ]
        batcher.start()  # all are queued before the worker looks
        return await asyncio.gather(*futures)

    async def one_at_a_time():
        return [
            await batcher.submit([s], JobOptions(SearchOptions(beam=4, alpha=0.6, nbest=1)))
            for s in sentences
        ]

    try:
        batched = asyncio.run(all_at_once())
        together = list(sizes)
        alone = asyncio.run(one_at_a_time())
    finally:
        batcher.stop()
    assert together == [len(sentences)]  # one batch of every request
    assert [got[0][0].text for got in batched] == [got[0][0].text for got in alone]
    for got, s in zip(alone, sentences):  # alone: the union of the request's pieces, as translate gives
        assert got[0][0].tokens == shortlisted.translate_nbest([s], beam=4, alpha=0.6)[0][0].tokens


class EchoTranslator:
    """Translates instantly (echoes), records the sentences of every batch: the waiting rule of
    the worker is tested without a model. ``inside``: called on the worker in every batch."""

    def __init__(self):
        self.batches: list[list[str]] = []
        self.inside: Callable[[], None] | None = None

    def translate_nbest(self, sentences, options=None, **kwargs):
        from nmt.infer.search import Hypothesis

        self.batches.append(list(sentences))
        if self.inside is not None:
            self.inside()
        return [[Hypothesis([], 0.0)] for _ in sentences]


# Nothing below depends on how fast threads run: max_wait_ms is far longer than any test (a worker
# that waits when it should not shows as a timeout), and the batcher's lock (its Condition) is held
# by the test where a thread switch on a loaded machine could change what the worker finds queued.
NO_END = 600_000  # max_wait_ms: 10 minutes


def test_worker_waits_only_for_the_requests_it_expects():
    """A lone client is never held back by --max-wait-ms; after a batch of N requests the worker
    waits (at most max_wait_ms) for N, so clients that come back one by one stay one batch; a
    group still waiting when a batch ends merges with the group that batch answered."""
    fake = EchoTranslator()
    batcher = Batcher(fake, max_batch_tokens=10_000, max_wait_ms=NO_END)
    opts = JobOptions(SearchOptions(beam=1, alpha=0.0, nbest=1))
    in_batch, go = threading.Event(), threading.Event()

    def hold():  # the worker stays in its batch until the test holds the lock
        in_batch.set()
        assert go.wait(60)

    async def scenario():
        # one client, three requests, each sent once the previous one is answered but before the
        # worker looks for its next batch (the lock held meanwhile): it still never waits
        fake.inside = hold
        future = batcher.submit(["alone 0"], opts)
        for i in range(1, 4):
            assert await asyncio.to_thread(in_batch.wait, 60), "a lone client was held back (max_wait)"
            in_batch.clear()
            # safe across awaits: a re-entrant lock, and the worker answers unlocked (if it locked: deadlock)
            with batcher._cond:
                go.set()
                await asyncio.wait_for(future, 60)
                go.clear()
                if i < 3:
                    future = batcher.submit([f"alone {i}"], opts)
        fake.inside = None
        # 6 clients at once, all queued before the worker looks: taken as they are waiting
        # (nothing expected beyond them)
        with batcher._cond:
            group = [batcher.submit([f"a{i}"], opts) for i in range(6)]
        await asyncio.wait_for(asyncio.gather(*group), 60)
        n_before = len(fake.batches)
        # the 6 come back 30 ms apart: the worker waits for all 6 (max_wait never ends it here)
        futures = []
        for i in range(6):
            futures.append(batcher.submit([f"b{i}"], opts))
            await asyncio.sleep(0.03)
        await asyncio.wait_for(asyncio.gather(*futures), 60)
        return n_before

    batcher.start()
    try:
        n_before = asyncio.run(scenario())
    finally:
        batcher.stop()
    assert fake.batches[:3] == [["alone 0"], ["alone 1"], ["alone 2"]]
    assert sorted(s for b in fake.batches[3:n_before] for s in b) == [f"a{i}" for i in range(6)]
    assert fake.batches[n_before:] == [[f"b{i}" for i in range(6)]]


def test_worker_wait_is_bounded_by_max_wait():
    """After a batch of 4, one request comes back: the worker waits max_wait for the other 3 (not
    less: it cannot take the request before its deadline), then takes it alone."""
    fake = EchoTranslator()
    batcher = Batcher(fake, max_batch_tokens=10_000, max_wait_ms=500)
    opts = JobOptions(SearchOptions(beam=1, alpha=0.0, nbest=1))

    async def scenario():
        with batcher._cond:  # the 4 are one batch: 4 expected next
            group = [batcher.submit([f"a{i}"], opts) for i in range(4)]
        await asyncio.gather(*group)
        start = time.monotonic()
        await asyncio.wait_for(batcher.submit(["only one comes back"], opts), 60)
        return time.monotonic() - start

    batcher.start()
    try:
        waited = asyncio.run(scenario())
    finally:
        batcher.stop()
    assert fake.batches[:-1] == [[f"a{i}" for i in range(4)]]
    assert 0.5 <= waited < 10.0  # at least max_wait by construction; 20x it only for a stalled machine
    assert fake.batches[-1] == ["only one comes back"]


def test_a_stopping_server_or_a_dead_worker_is_a_503_that_does_not_say_queue_full(run_dir):
    """503 says why: a full queue, the server stopping, or the worker not running (not "queue
    full" for all three)."""
    app, models = make_app(run_dir)

    def die(*args, **kwargs):
        raise SystemExit("killed")

    models["tiny"].batcher.translator.translate_nbest = die
    with TestClient(app, raise_server_exceptions=False) as c:
        assert c.post("/translate", json={"text": SENTENCES[0]}).status_code == 500  # the worker dies
        r = c.post("/translate", json={"text": SENTENCES[0]})
        assert r.status_code == 503 and r.json()["error"]["message"] == (
            "the worker is not running (SystemExit: killed); retry later"
        )
        models["tiny"].batcher.stop()
        r = c.post("/translate", json={"text": SENTENCES[0]})
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["message"] == "the server is shutting down; retry later"


# ----------------------------------------------------------------------------------- scheduling
def test_a_short_request_runs_between_the_steps_of_a_long_one(run_dir_translator):
    """While a long search (11 sentences, beam 32) is at its 3rd step, another long request
    (beam 31) and then a one-sentence greedy request come: the short one is answered first, between
    two steps of the running search; the other long one waits its turn (it does not run inside the
    first). Every translation is the one each request gets alone."""
    t, model = stepped(run_dir_translator, pause_at=3)
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
    assert texts(long) == texts(run_dir_translator.translate_nbest(LONG, beam=32, alpha=0.6, nbest=2))
    assert texts(other) == texts(run_dir_translator.translate_nbest(LONG, beam=31, alpha=0.6))
    assert texts(short) == texts(run_dir_translator.translate_nbest([SENTENCES[0]], beam=1, alpha=0.0))


def test_cancelled_requests_are_dropped_from_the_queue_or_their_search_abandoned(run_dir_translator):
    """A queued request whose future is cancelled is never searched; a running search whose only
    request is cancelled stops at its next step; the worker then serves the next request."""
    t, model = stepped(run_dir_translator, pause_at=2)
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
    steps_alone = SteppedModel(run_dir_translator.model)
    alone = copy.copy(run_dir_translator)
    alone.model = steps_alone
    assert texts(after) == texts(alone.translate_nbest([SENTENCES[1]], beam=1, alpha=0.0))
    assert model.steps == 2 + steps_alone.steps  # the long search stopped after its 2nd step


def test_deadline_is_504_json_and_the_work_is_cancelled(run_dir, run_dir_translator):
    """A search paused at its first step gets no answer within --timeout 0.5 s: a 504, and its work
    stops there. The request after it is given 60 s (the limits are read per request): on a loaded
    machine its own search may take longer than 0.5 s, and this test is not about that one."""
    limits = Limits(timeout=0.5)
    app, models = make_app(run_dir, limits=limits)
    t, model = stepped(run_dir_translator, pause_at=1)
    models["tiny"].batcher.translator = t
    with TestClient(app) as c:
        # max_words 0: LONG's 12-word sentence (longer than the tiny model's training sentences) whole
        r = c.post("/translate", json={"text": LONG, "beam": 4, "max_words": 0, **RAW})
        assert r.status_code == 504
        assert r.json() == {
            "error": {
                "status": 504,
                "message": "no answer within 0.5 s (--timeout); the request was cancelled",
            }
        }
        limits.timeout = 60.0
        model.resume.set()  # the search wakes up after its 504, inside its first decoding step
        r = c.post("/translate", json={"text": SENTENCES[0], "beam": 1, **RAW})
        assert r.status_code == 200
        wait_idle(models["tiny"].batcher)  # a search that went on would be running or done by now
        assert model.encoded == [len(LONG), 1]
        # the timed-out search (len(LONG) sentences: >= 2 rows a step, 4 per sentence after the
        # first) made no step after the one it was paused in; the later request's steps have 1 row
        assert len(LONG) >= 2 and sum(rows > 1 for rows in model.rows) == 1, model.rows
        assert model.rows[1:] and set(model.rows[1:]) == {1}
        assert 'nmt_errors_total{status="504"} 1.0' in c.get("/metrics").text


def test_a_client_that_disconnects_takes_its_queued_request_with_it(run_dir, run_dir_translator):
    """ASGI: the client of a queued request disconnects: the request leaves the queue at once
    and /metrics counts it as 499."""
    app, models = make_app(run_dir)
    batcher = models["tiny"].batcher
    t, model = stepped(run_dir_translator, pause_at=1)
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
        first = asyncio.ensure_future(call({"text": SENTENCES[0], "beam": 2, **RAW}, stays))
        assert await asyncio.to_thread(model.paused.wait, 60)  # the worker is inside the first search
        second = asyncio.ensure_future(call({"text": SENTENCES[1], "beam": 3, **RAW}, leaves))
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
def test_work_budgets_per_request_and_per_queue(run_dir, run_dir_translator):
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
    t, model = stepped(run_dir_translator, pause_at=1)
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
        asyncio.run(_submit_twice(Batcher(run_dir_translator, max_queue_work=10)))


def test_health_notices_a_stuck_or_dead_worker(run_dir, run_dir_translator):
    """/health is 503 while the worker is held in one step for longer than --timeout (0.3 s), and 200
    again once it has answered the next request. That request is given 60 s (the limits are read
    per request: on a loaded machine its search may take longer than 0.3 s), then /health is asked
    at 0.3 s again until it answers 200 (a worker that stayed stuck never does)."""
    limits = Limits(timeout=0.3)
    app, models = make_app(run_dir, limits=limits)
    t, model = stepped(run_dir_translator, pause_at=1)
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
        limits.timeout = 60.0
        model.resume.set()
        assert c.post("/translate", json={"text": SENTENCES[1], "beam": 1}).status_code == 200
        limits.timeout = 0.3
        deadline = time.monotonic() + 30
        while c.get("/health").status_code != 200:
            assert time.monotonic() < deadline, "/health never came back after the worker answered"
            time.sleep(0.05)

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
