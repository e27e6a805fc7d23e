"""`nmt serve`: every endpoint and error through FastAPI's TestClient, dynamic batching, the CLI,
a real server under 32 concurrent clients with SIGTERM draining, and the page in Debian's chromium."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import pytest

pytest.importorskip("fastapi", reason="nmt[serve] not installed (pip install 'nmt[serve]')")
from fastapi.testclient import TestClient  # noqa: E402
from serve_fixtures import SENTENCES, Server, request  # noqa: E402

from nmt.cli import main  # noqa: E402
from nmt.infer.options import SearchOptions  # noqa: E402
from nmt.infer.translate import Translator  # noqa: E402
from nmt.serve.app import Limits, create_app  # noqa: E402
from nmt.serve.batcher import Batcher, JobOptions  # noqa: E402
from nmt.serve.command import add_serve_args, build_models  # noqa: E402


@pytest.fixture(scope="module")
def translator(run_dir) -> Translator:
    return Translator.load(run_dir, device="cpu", precision="fp32")


def make_app(run_dir, *extra, api_key=None, limits=None):
    parser = argparse.ArgumentParser()
    add_serve_args(parser)
    args = parser.parse_args([f"tiny={run_dir}", *extra])
    models = build_models({"tiny": run_dir}, args)
    return create_app(models, api_key=api_key, limits=limits), models


@pytest.fixture(scope="module")
def client(run_dir):
    app, _ = make_app(run_dir, limits=Limits(max_chars=500, max_sentences=20))
    with TestClient(app) as c:
        yield c


def test_translate_matches_translator_in_input_order(client, translator):
    expected = translator.translate_nbest(SENTENCES, beam=4, alpha=0.6, nbest=2)
    r = client.post("/translate", json={"model": "tiny", "text": SENTENCES, "nbest": 2, "alignment": True})
    assert r.status_code == 200
    out = r.json()["translations"]
    assert len(out) == len(SENTENCES) and any(t["text"] for t in out)
    for sent, got, want in zip(SENTENCES, out, expected):
        assert got["text"] == want[0].text and [h["text"] for h in got["nbest"]] == [w.text for w in want]
        assert got["score"] == pytest.approx(want[0].score, abs=1e-5)
        n_src, n_tgt = len(translator.encode([sent])[0][0]) - 1, len(want[0].tokens)
        assert [t for _, t in got["alignment"]] == list(range(n_tgt if n_src > 0 else 0))
        assert all(0 <= s < n_src for s, _ in got["alignment"])
    assert out[SENTENCES.index("")] == {
        "text": "",
        "score": 0.0,
        "nbest": [{"text": "", "score": 0.0}],
        "alignment": [],
    }
    # one string, greedy, default model; alpha defaults to 0 for beam 1
    r = client.post("/translate", json={"text": SENTENCES[0], "beam": 1})
    assert r.json()["translations"][0]["text"] == translator.translate([SENTENCES[0]], beam=1, alpha=0.0)[0]
    assert client.post("/translate", json={"text": []}).json() == {"model": "tiny", "translations": []}


def test_translate_mbr_is_the_translators_mbr_choice(client, translator):
    """ "mbr": true answers each sentence with the MBR choice among the beam's n-best, as
    Translator.translate(..., mbr=MBR()) and `nmt translate --mbr` do."""
    from nmt.infer.mbr import MBR

    r = client.post("/translate", json={"text": SENTENCES, "beam": 5, "mbr": True})
    assert r.status_code == 200
    out = r.json()["translations"]
    assert [t["text"] for t in out] == translator.translate(SENTENCES, beam=5, mbr=MBR())
    assert all(len(t["nbest"]) == 1 for t in out)
    nbest = translator.translate_nbest(SENTENCES, beam=5, nbest=5)  # the choice is one of the n-best
    assert all(t["text"] in [h.text for h in hyps] for t, hyps in zip(out, nbest))


@pytest.mark.parametrize(
    "body, status, message",
    [
        (b'{"text": "a dog', 400, "not valid JSON"),
        (b'{"text": "a \xff dog"}', 400, "not valid UTF-8 (byte 0xff at offset 12)"),
        (b'{"text": 3}', 422, "text"),
        (b'{"text": "a", "beam": "4"}', 422, "beam"),
        (b'{"text": "a", "beam": 0}', 422, "beam"),
        (b'{"text": "a", "colour": 1}', 422, "colour"),
        (b'{"text": ["a", 2]}', 422, "text"),
        (b'{"text": "a", "beam": 2, "nbest": 3}', 422, "nbest: 3 must be <= beam (2)"),
        (b'{"text": "a", "beam": 1, "mbr": true}', 422, "needs beam >= 2 and nbest 1 (got beam 1, nbest 1)"),
        (b'{"text": "a", "beam": 4, "nbest": 2, "mbr": true}', 422, "needs beam >= 2 and nbest 1"),
        (b'{"text": "a", "model": "fr-en"}', 404, "unknown model 'fr-en' (serving: tiny)"),
        (json.dumps({"text": ["a"] * 21}).encode(), 413, "21 sentences: at most 20"),
        (json.dumps({"text": "a" * 501}).encode(), 413, "501 characters: at most 500"),
    ],
)
def test_translate_errors(client, body, status, message):
    r = client.post("/translate", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status
    assert r.json()["error"]["status"] == status and message in r.json()["error"]["message"]


def test_a_lone_surrogate_in_a_constraint_is_a_422_naming_it(client):
    """A constraint phrase holding a lone surrogate (a JSON escape) is refused as text is: 422, not
    a 500 from the tokenizer."""
    body = b'{"text": ["a dog", "a cat"], "constraints": [["goden"], ["x\\udc80"]]}'
    r = client.post("/translate", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422
    assert r.json()["error"] == {
        "status": 422,
        "message": "constraints: sentence 2, phrase 1: a lone surrogate '\\udc80' at character 1 "
        "is not Unicode text",
    }


@pytest.mark.parametrize("path", ["/translate", "/attention"])
def test_a_number_too_long_to_read_is_a_400(client, path):
    """An integer of more digits than Python reads (4300) is a 400 naming the problem, not a 500."""
    body = b'{"text": "a", "beam": ' + b"9" * 5000 + b"}"
    r = client.post(path, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith("request body holds a number too long to read (")


def test_health_models_metrics_page_docs_attention(client, translator, run_dir):
    assert client.get("/health").json() == {"status": "ok", "models": ["tiny"], "auth": False}
    info = client.get("/models").json()["models"][0]
    assert info["name"] == "tiny" and (info["src_lang"], info["tgt_lang"]) == ("en", "de")
    assert info["vocabulary_size"] == 120 and info["config"]["model"]["d_model"] == 32
    assert info["parameters"] == sum(p.numel() for p in translator.model.parameters())
    r = client.post("/attention", json={"text": SENTENCES[1]})
    att = r.json()
    best = translator.translate_nbest([SENTENCES[1]])[0][0]
    assert att["text"] == best.text and att["target_pieces"] == ["<s>"] + [
        translator.sp.id_to_piece(i) for i in best.tokens
    ]
    assert att["source_pieces"][-1] == "</s>"
    layers, heads = len(att["cross"]), len(att["cross"][0])
    assert (layers, heads) == (2, 2)
    for head in att["cross"][1]:
        assert len(head) == len(att["target_pieces"]) and all(
            len(row) == len(att["source_pieces"]) for row in head
        )
        assert all(abs(sum(row) - 1) < 1e-3 for row in head)
    page = client.get("/")
    assert page.status_code == 200 and "/static/app.js" in page.text and 'name="viewport"' in page.text
    assert "http" not in client.get("/static/app.js").text.replace("HTTP ", "")  # nothing fetched outside
    assert client.get("/static/style.css").status_code == 200
    assert client.get("/docs").status_code == 200
    assert {"/translate", "/attention", "/health", "/models", "/metrics"} <= set(
        client.get("/openapi.json").json()["paths"]
    )
    missing = client.get("/no/such/page")
    assert missing.status_code == 404 and missing.json()["error"]["status"] == 404
    assert client.post("/translate", json={"text": SENTENCES[0], "beam": 1}).status_code == 200
    metrics = client.get("/metrics").text
    assert 'nmt_requests_total{endpoint="/translate",status="200"}' in metrics
    assert 'nmt_errors_total{status="404"}' in metrics
    assert 'nmt_request_latency_seconds_bucket{endpoint="/translate"' in metrics
    assert 'nmt_batch_sentences_count{model="tiny"}' in metrics
    assert 'nmt_queue_sentences{model="tiny"} 0.0' in metrics


def test_api_key(run_dir):
    app, _ = make_app(run_dir, api_key="s3cret")
    with TestClient(app) as c:
        body = {"text": SENTENCES[0], "beam": 1}
        for headers in ({}, {"Authorization": "Bearer nope"}, {"X-API-Key": "s3cre"}):
            r = c.post("/translate", json=body, headers=headers)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            assert "API key" in r.json()["error"]["message"]
        assert c.get("/models").status_code == 401
        assert c.post("/translate", json=body, headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert c.post("/translate", json=body, headers={"X-API-Key": "s3cret"}).status_code == 200
        assert c.get("/health").json()["auth"] is True


def test_a_non_ascii_api_key_is_accepted(run_dir):
    """The key file is UTF-8: a client that sends the key's UTF-8 bytes is let in (header values
    are bytes; they are compared as bytes), a wrong one is still a 401."""
    app, _ = make_app(run_dir, api_key="schlüssel")
    with TestClient(app) as c:
        body = {"text": SENTENCES[0], "beam": 1}
        for headers in ({"X-API-Key": "schlüssel".encode()}, {"Authorization": "Bearer schlüssel".encode()}):
            assert c.post("/translate", json=body, headers=headers).status_code == 200
        for headers in ({"X-API-Key": "schlüsseL".encode()}, {"X-API-Key": "schlussel"}):
            assert c.post("/translate", json=body, headers=headers).status_code == 401


def test_queue_full_is_503_with_retry_after(run_dir):
    app, models = make_app(run_dir, "--max-queue", "1")
    batcher = models["tiny"].batcher
    release, entered = threading.Event(), threading.Event()
    real = batcher.translator.translate_nbest

    def blocking(*args, **kwargs):
        entered.set()
        release.wait(30)
        return real(*args, **kwargs)

    batcher.translator.translate_nbest = blocking
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


def test_batching_never_changes_a_translation(translator):
    sizes = []
    batcher = Batcher(translator, max_batch_tokens=4096, max_wait_ms=300, on_batch=sizes.append)
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
        alone = translator.translate_nbest([s], beam=4, alpha=0.6, nbest=2)[0]
        assert [(t.text, t.tokens) for t in got[0]] == [(t.text, t.tokens) for t in alone]
        assert [t.score for t in got[0]] == pytest.approx([t.score for t in alone], abs=1e-5)


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


def test_cli_warning_engine_and_errors(run_dir, tmp_path, monkeypatch, capsys):
    import inspect

    import uvicorn

    calls = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self: calls.append(self.config))
    assert main(["serve", f"en-de={run_dir}", "--host", "0.0.0.0", "--port", "8123"]) == 0
    assert calls[-1].host == "0.0.0.0" and calls[-1].port == 8123
    assert (calls[-1].limit_concurrency, calls[-1].timeout_graceful_shutdown) == (256, 20.0)
    assert "warning: listening on 0.0.0.0" in capsys.readouterr().err
    assert main(["serve", str(run_dir), "--max-connections", "8", "--shutdown-grace", "5"]) == 0
    assert (calls[-1].limit_concurrency, calls[-1].timeout_graceful_shutdown) == (8, 5.0)
    for bad in (
        ["--timeout", "0"],
        ["--max-request-work", "0"],
        ["--max-body-bytes", "-1"],
        ["--allowed-hosts", ","],
    ):
        assert main(["serve", str(run_dir), *bad]) == 2
        assert f"nmt serve: error: {bad[0]} " in capsys.readouterr().err
    key = tmp_path / "key"
    key.write_text("k\n")
    assert main(["serve", str(run_dir), "--host", "0.0.0.0", "--api-key-file", str(key)]) == 0
    assert "warning" not in capsys.readouterr().err
    key.write_text("\n")
    assert main(["serve", str(run_dir), "--api-key-file", str(key)]) == 2
    assert f"nmt serve: error: {key}: line 1: empty API key" in capsys.readouterr().err
    assert main(["serve", str(tmp_path / "nope")]) == 2
    assert "no such checkpoint" in capsys.readouterr().err
    assert main(["serve", f"a={run_dir}", f"a={run_dir}"]) == 2
    assert "given twice" in capsys.readouterr().err
    assert main(["serve", str(run_dir), "--max-batch-tokens", "0"]) == 2
    if "engine" not in inspect.signature(Translator.load).parameters:
        assert main(["serve", str(run_dir), "--engine", "ctranslate2"]) == 2
        assert "--engine ctranslate2: this nmt has no ctranslate2 engine" in capsys.readouterr().err


def test_real_server_32_clients_and_sigterm_drain(run_dir, tmp_path):
    hold = tmp_path / "hold"  # while it exists, a search waits at its first step for the signal
    options = ("--max-wait-ms", "10", "--shutdown-grace", "60")
    server = Server(f"tiny={run_dir}", *options, log=tmp_path / "serve.log", hold=hold)
    try:
        single = {}
        for s in SENTENCES:  # one request at a time: the reference
            status, body = request(server.url + "/translate", {"text": s})
            assert status == 200
            single[s] = body["translations"][0]["text"]

        def client(i: int) -> list[tuple[str, int, str]]:
            out = []
            for j in range(10):
                s = SENTENCES[(i + j) % len(SENTENCES)]
                status, body = request(server.url + "/translate", {"text": s})
                out.append((s, status, body["translations"][0]["text"] if status == 200 else body))
            return out

        with ThreadPoolExecutor(32) as pool:
            results = [r for rs in pool.map(client, range(32)) for r in rs]
        assert len(results) == 320
        assert [r for r in results if r[1] != 200] == []
        assert [r for r in results if r[2] != single[r[0]]] == []
        metrics = urllib.request.urlopen(server.url + "/metrics").read().decode()
        batches = [line for line in metrics.splitlines() if line.startswith("nmt_batch_sentences_count")]
        assert batches and float(batches[0].split()[-1]) < 320 + len(SENTENCES)  # requests were batched
        # SIGTERM while a long request is in flight (for certain: its search waits at its first
        # step until the signal has come): it is answered, then the server exits
        searched = server.log.read_text().count("nmt-test: encode")
        hold.touch()
        with ThreadPoolExecutor(1) as pool:
            long = pool.submit(request, server.url + "/translate", {"text": SENTENCES * 15, "beam": 8})
            deadline = time.monotonic() + 60
            while server.log.read_text().count("nmt-test: encode") == searched:  # not searched yet
                assert time.monotonic() < deadline, "the long request was never searched"
                time.sleep(0.01)
            server.proc.send_signal(signal.SIGTERM)
            status, body = long.result(timeout=60)
        assert status == 200 and len(body["translations"]) == len(SENTENCES) * 15
        assert server.proc.wait(timeout=30) == 0
    finally:
        server.stop()


def test_page_in_chromium(run_dir, tmp_path):
    """Types, clicks, waits, checks that the heatmap is drawn; screenshot (phone-sized window) to
    tmp_path and, with NMT_SCREENSHOT=FILE, to FILE. NMT_SERVE_TEST_CHECKPOINT serves another model."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.skip("chromium / chromedriver not installed (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    checkpoint = os.environ.get("NMT_SERVE_TEST_CHECKPOINT", str(run_dir))
    sentence = os.environ.get("NMT_SERVE_TEST_SENTENCE", SENTENCES[0])
    server = Server(f"en-de={checkpoint}", log=tmp_path / "serve.log")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    # a phone-sized screen (headless windows are at least 500 px wide; emulation is not)
    options.add_experimental_option(
        "mobileEmulation", {"deviceMetrics": {"width": 390, "height": 844, "pixelRatio": 2}}
    )
    browser = webdriver.Chrome(service=webdriver.ChromeService(executable_path=driver), options=options)
    try:
        browser.get(server.url + "/")
        WebDriverWait(browser, 30).until(lambda b: b.find_element(By.ID, "model").get_attribute("value"))
        browser.find_element(By.ID, "source").send_keys(sentence)
        browser.find_element(By.ID, "go").click()
        WebDriverWait(browser, 60).until(
            lambda b: b.find_element(By.ID, "heatmap").get_attribute("data-drawn")
        )
        translation = browser.find_element(By.ID, "translation").text
        assert translation.strip() != ""
        assert len(browser.find_elements(By.CSS_SELECTOR, "#nbestlist li")) >= 1
        canvas = browser.find_element(By.ID, "heatmap")
        assert canvas.size["width"] > 50 and canvas.size["height"] > 50
        # something other than white was painted in the heatmap's cells
        colours = browser.execute_script(
            "const c = document.getElementById('heatmap'); const d = c.getContext('2d')"
            ".getImageData(0, 0, c.width, c.height).data; const s = new Set();"
            "for (let i = 0; i < d.length; i += 4) s.add(d[i] + ',' + d[i+1] + ',' + d[i+2]); return s.size;"
        )
        assert colours > 5
        # no horizontal scrolling of the page on a phone-sized screen
        assert browser.execute_script("return window.innerWidth") == 390
        assert browser.execute_script("return document.documentElement.scrollWidth") <= 390
        shot = tmp_path / "serve-page.png"
        browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 5000
        if os.environ.get("NMT_SCREENSHOT"):
            shutil.copyfile(shot, os.environ["NMT_SCREENSHOT"])
    finally:
        browser.quit()
        server.stop()


def test_page_translates_with_an_engine_without_attention_maps(run_dir, tmp_path):
    """`--engine ctranslate2`: /attention is a 400, the page still shows the translation and says
    why there is no heatmap (it used to show only the 400's message)."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver):
        pytest.skip("chromium / chromedriver not installed (apt-get install chromium chromium-driver)")
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    env_cache = os.environ.get("NMT_CACHE_DIR")
    os.environ["NMT_CACHE_DIR"] = str(tmp_path / "cache")  # the on-the-fly export, for the server too
    try:
        server = Server(f"en-de={run_dir}", "--engine", "ctranslate2", log=tmp_path / "serve.log")
    finally:
        if env_cache is None:
            del os.environ["NMT_CACHE_DIR"]
        else:
            os.environ["NMT_CACHE_DIR"] = env_cache
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    browser = webdriver.Chrome(service=webdriver.ChromeService(executable_path=driver), options=options)
    try:
        browser.get(server.url + "/")
        WebDriverWait(browser, 30).until(lambda b: b.find_element(By.ID, "model").get_attribute("value"))
        browser.find_element(By.ID, "source").send_keys(SENTENCES[0])
        browser.find_element(By.ID, "go").click()
        WebDriverWait(browser, 60).until(lambda b: b.find_element(By.ID, "go").is_enabled())
        WebDriverWait(browser, 60).until(lambda b: b.find_element(By.ID, "translation").text.strip())
        status = browser.find_element(By.ID, "status")
        assert status.get_attribute("class") != "error"
        assert status.text.startswith("no heatmap:") and "torch engine" in status.text
        assert len(browser.find_elements(By.CSS_SELECTOR, "#nbestlist li")) >= 1
    finally:
        browser.quit()
        server.stop()


def test_other_engine_serves_text_but_no_attention(run_dir, translator):
    """A translator whose model is not nmt's (the ctranslate2 engine): translation works,
    alignment and attention are a 400 naming the reason."""

    class OtherEngine:
        model, sp = object(), translator.sp
        encode, translate_nbest = translator.encode, translator.translate_nbest

    app, models = make_app(run_dir)
    models["tiny"].batcher.translator = OtherEngine()
    with TestClient(app) as c:
        assert (
            c.post("/translate", json={"text": SENTENCES[0]}).json()["translations"][0]["text"]
            == translator.translate([SENTENCES[0]])[0]
        )
        for path, body in (("/translate", {"text": "a", "alignment": True}), ("/attention", {"text": "a"})):
            r = c.post(path, json=body)
            assert r.status_code == 400 and "needs the torch engine" in r.json()["error"]["message"]


def test_an_exported_ctranslate2_directory_is_served(run_dir, tmp_path):
    """`nmt serve EXPORT --engine ctranslate2` serves a directory of `nmt export ctranslate2` (which
    Translator.load takes): /models gives the export's model config, /translate translates."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    export = tmp_path / "ct2"
    assert main(["export", "ctranslate2", str(run_dir), str(export)]) == 0
    parser = argparse.ArgumentParser()
    add_serve_args(parser)
    args = parser.parse_args([f"ct2={export}", "--engine", "ctranslate2"])
    models = build_models({"ct2": export}, args)
    expected = Translator.load(export, engine="ctranslate2").translate([SENTENCES[0]])
    with TestClient(create_app(models)) as c:
        info = c.get("/models").json()["models"][0]
        assert (info["name"], info["checkpoint"], info["vocabulary_size"]) == ("ct2", "ct2", 120)
        assert info["config"]["model"]["d_model"] == 32
        r = c.post("/translate", json={"text": SENTENCES[0]})
        assert r.status_code == 200 and r.json()["translations"][0]["text"] == expected[0]


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
