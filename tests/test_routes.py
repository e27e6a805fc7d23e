"""nmt/serve/routes.py, the endpoints of `nmt serve` through FastAPI's TestClient: /translate as the
Translator gives it, /health, /models, /metrics, the page, /docs, /attention, the API key."""

from __future__ import annotations

import asyncio
import json

import pytest

from nmt.realtext.quality import QualityOptions

pytest.importorskip("fastapi", reason="nmt[serve] not installed (pip install 'nmt[serve]')")
from fastapi.testclient import TestClient  # noqa: E402
from serve_fixtures import SENTENCES, make_app  # noqa: E402

from nmt.serve.app import Limits  # noqa: E402

RAW = QualityOptions(guards=False)  # the search's output as it is (no retry of flagged sentences)


def test_translate_matches_translator_in_input_order(serve_client, run_dir_translator):
    expected = run_dir_translator.translate_nbest(SENTENCES, beam=4, alpha=0.6, nbest=2)
    r = serve_client.post(
        "/translate",
        json={
            "model": "tiny",
            "text": SENTENCES,
            "nbest": 2,
            "alignment": True,
            "guards": False,
            "protect": False,
        },
    )
    assert r.status_code == 200
    out = r.json()["translations"]
    assert len(out) == len(SENTENCES) and any(t["text"] for t in out)
    for sent, got, want in zip(SENTENCES, out, expected):
        assert got["text"] == want[0].text and [h["text"] for h in got["nbest"]] == [w.text for w in want]
        assert got["score"] == pytest.approx(want[0].score, abs=1e-5)
        n_src, n_tgt = len(run_dir_translator.encode([sent])[0][0]) - 1, len(want[0].tokens)
        assert [t for _, t in got["alignment"]] == list(range(n_tgt if n_src > 0 else 0))
        assert all(0 <= s < n_src for s, _ in got["alignment"])
    assert out[SENTENCES.index("")] == {
        "text": "",
        "score": 0.0,
        "nbest": [{"text": "", "score": 0.0, "alignment": []}],
        "alignment": [],
        "confidence": None,
        "flags": [],
        "restored": [],
        "words": [],
    }
    # one string, greedy, default model; alpha defaults to 0 for beam 1
    r = serve_client.post("/translate", json={"text": SENTENCES[0], "beam": 1, "guards": False})
    assert (
        r.json()["translations"][0]["text"]
        == run_dir_translator.translate(
            [SENTENCES[0]], beam=1, alpha=0.0, quality=QualityOptions(guards=False)
        )[0]
    )
    assert serve_client.post("/translate", json={"text": []}).json() == {"model": "tiny", "translations": []}


def test_translate_mbr_is_the_translators_mbr_choice(serve_client, run_dir_translator):
    """ "mbr": true answers each sentence with the MBR choice among the beam's n-best, as
    Translator.translate(..., mbr=MBR()) and `nmt translate --mbr` do."""
    from nmt.infer.mbr import MBR
    from nmt.realtext.job import TextOptions

    # max_words 0: the 12-word sentence is longer than any of the tiny model's training sentences,
    # which real-text handling would cut into parts; here each sentence is translated whole
    body = {"text": SENTENCES, "beam": 5, "mbr": True, "max_words": 0, "guards": False}
    r = serve_client.post("/translate", json=body)
    assert r.status_code == 200
    out = r.json()["translations"]
    whole = TextOptions(max_words=0)
    assert [t["text"] for t in out] == run_dir_translator.translate(
        SENTENCES, beam=5, mbr=MBR(), text=whole, quality=RAW
    )
    assert all(len(t["nbest"]) == 1 for t in out)
    nbest = run_dir_translator.translate_nbest(SENTENCES, beam=5, nbest=5)  # the choice is one of the n-best
    assert all(t["text"] in [h.text for h in hyps] for t, hyps in zip(out, nbest))


def test_health_models_metrics_page_docs_attention(serve_client, run_dir_translator, run_dir):
    assert serve_client.get("/health").json() == {"status": "ok", "models": ["tiny"], "auth": False}
    info = serve_client.get("/models").json()["models"][0]
    assert info["name"] == "tiny" and (info["src_lang"], info["tgt_lang"]) == ("en", "de")
    assert info["vocabulary_size"] == 120 and info["config"]["model"]["d_model"] == 32
    assert info["parameters"] == sum(p.numel() for p in run_dir_translator.model.parameters())
    r = serve_client.post("/attention", json={"text": SENTENCES[1]})
    att = r.json()
    best = run_dir_translator.translate_nbest([SENTENCES[1]])[0][0]
    assert att["text"] == best.text and att["target_pieces"] == ["<s>"] + [
        run_dir_translator.sp.id_to_piece(i) for i in best.tokens
    ]
    assert att["source_pieces"][-1] == "</s>"
    layers, heads = len(att["cross"]), len(att["cross"][0])
    assert (layers, heads) == (2, 2)
    for head in att["cross"][1]:
        assert len(head) == len(att["target_pieces"]) and all(
            len(row) == len(att["source_pieces"]) for row in head
        )
        assert all(abs(sum(row) - 1) < 1e-3 for row in head)
    page = serve_client.get("/")
    assert page.status_code == 200 and "/static/app.js" in page.text and 'name="viewport"' in page.text
    assert "http" not in serve_client.get("/static/app.js").text.replace(
        "HTTP ", ""
    )  # nothing fetched outside
    assert serve_client.get("/static/style.css").status_code == 200
    assert serve_client.get("/docs").status_code == 200
    assert {"/translate", "/attention", "/health", "/models", "/metrics"} <= set(
        serve_client.get("/openapi.json").json()["paths"]
    )
    missing = serve_client.get("/no/such/page")
    assert missing.status_code == 404 and missing.json()["error"]["status"] == 404
    assert serve_client.post("/translate", json={"text": SENTENCES[0], "beam": 1}).status_code == 200
    metrics = serve_client.get("/metrics").text
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


def test_other_engine_serves_text_but_no_attention(run_dir, run_dir_translator):
    """A translator whose model is not nmt's (the ctranslate2 engine): translation works,
    alignment and attention are a 400 naming the reason."""

    class OtherEngine:
        model, sp = object(), run_dir_translator.sp
        encode, translate_nbest = run_dir_translator.encode, run_dir_translator.translate_nbest

    app, models = make_app(run_dir)
    models["tiny"].batcher.translator = OtherEngine()
    with TestClient(app) as c:
        assert (
            c.post("/translate", json={"text": SENTENCES[0]}).json()["translations"][0]["text"]
            == run_dir_translator.translate([SENTENCES[0]])[0]
        )
        for path, body in (("/translate", {"text": "a", "alignment": True}), ("/attention", {"text": "a"})):
            r = c.post(path, json=body)
            assert r.status_code == 400 and "needs the torch engine" in r.json()["error"]["message"]


def test_alignment_is_computed_for_each_returned_translation_only(run_dir, monkeypatch):
    import nmt.infer.attention_maps as attention_maps

    calls = []
    real = attention_maps.align
    monkeypatch.setattr(attention_maps, "align", lambda *a, **k: calls.append(1) or real(*a, **k))
    app, _ = make_app(run_dir)
    with TestClient(app) as c:
        # no guards: a flagged sentence's retry would be aligned too
        body = {"text": SENTENCES[:3], "beam": 4, "nbest": 2, "alignment": True, "guards": False}
        r = c.post("/translate", json=body)
    out = r.json()["translations"]
    assert r.status_code == 200 and all("alignment" in t for t in out)
    assert all("alignment" in a for t in out for a in t["nbest"])
    assert len(calls) == 6  # the n-best returned (2 of the beam's 4) of each of 3 sentences


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


def test_a_truncated_sentence_is_reported(run_dir, run_dir_translator):
    app, _ = make_app(run_dir)
    long = " ".join(["the small red car"] * 120)
    n = len(run_dir_translator.sp.encode(long))
    assert n > 255
    with TestClient(app) as c:
        # one sentence per text (split and recase off): the plain path's warning
        plain = {"split": False, "recase": False, "max_words": 0}
        r = c.post("/translate", json={"text": [SENTENCES[0], long], "beam": 1, **plain})
        assert r.status_code == 200
        assert r.json()["warnings"] == [f"text 2: {n:,} pieces, truncated to 255 (model.max_positions=256)"]
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
