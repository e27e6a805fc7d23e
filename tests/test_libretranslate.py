"""LibreTranslate's API on `nmt serve` (nmt/serve/libretranslate.py): the real libretranslatepy
client against a running server, then each field, format and error through FastAPI's TestClient."""

from __future__ import annotations

import argparse
import time
import urllib.error
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("fastapi", reason="nmt[serve] not installed (pip install 'nmt[serve]')")
from fastapi.testclient import TestClient  # noqa: E402
from serve_fixtures import SENTENCES, Server, hold_worker, make_app, stepped  # noqa: E402

from nmt.infer.options import SearchOptions  # noqa: E402
from nmt.realtext.pipeline import TranslationRequest  # noqa: E402
from nmt.serve.app import Limits, create_app  # noqa: E402
from nmt.serve.command import add_serve_args, build_models  # noqa: E402

BASE = "/libretranslate"


def make_client(run_dir, *, api_key=None, limits=None) -> TestClient:
    parser = argparse.ArgumentParser()
    add_serve_args(parser)
    models = build_models({"tiny": run_dir}, parser.parse_args([f"tiny={run_dir}"]))
    return TestClient(create_app(models, api_key=api_key, limits=limits))


@pytest.fixture(scope="module")
def libretranslate_client(run_dir):
    with make_client(run_dir, limits=Limits(max_chars=500, max_sentences=20)) as c:
        yield c


def test_libretranslatepy_translates_detects_and_lists_languages_on_a_running_server(
    run_dir, run_dir_translator, tmp_path
):
    libretranslatepy = pytest.importorskip("libretranslatepy", reason="pip install 'nmt[libretranslate]'")
    key = tmp_path / "key"
    key.write_text("s3cret\n")
    server = Server(f"tiny={run_dir}", "--api-key-file", str(key), log=tmp_path / "serve.log")
    try:
        lt = libretranslatepy.LibreTranslateAPI(server.url + BASE, api_key="s3cret")
        assert lt.translate(SENTENCES[0], "en", "de") == run_dir_translator.translate([SENTENCES[0]])[0]
        assert lt.languages() == [
            {"code": "en", "name": "English", "targets": ["de"]},
            {"code": "de", "name": "German", "targets": []},
        ]
        assert lt.detect(SENTENCES[1]) == [{"confidence": 100.0, "language": "en"}]
        for wrong, status in ((None, 400), ("nope", 403)):
            with pytest.raises(urllib.error.HTTPError) as e:
                libretranslatepy.LibreTranslateAPI(server.url + BASE, api_key=wrong).translate(
                    "a cat", "en", "de"
                )
            assert e.value.code == status and "API key" in e.value.read().decode()
    finally:
        assert server.stop() == 0


def test_a_list_lines_alternatives_and_auto_are_translated_as_libretranslate_answers(
    libretranslate_client, run_dir_translator
):
    lines = [SENTENCES[0], f"  {SENTENCES[1]}\n\n{SENTENCES[2]} ", "   "]
    r = libretranslate_client.post(
        f"{BASE}/translate", json={"q": lines, "source": "auto", "target": "de", "alternatives": 1}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    request = TranslationRequest(lines, search=SearchOptions(beam=4, alpha=0.6, nbest=2))
    ours = run_dir_translator.translate_request(request)  # the pipeline every door runs
    assert body["translatedText"] == [t.text for t in ours]
    assert body["alternatives"][0] == [a.text for a in ours[0].nbest[1:]] and body["alternatives"][2] == []
    assert body["confidence"][:2] == [pytest.approx(t.confidence, abs=1e-4) for t in ours[:2]]
    assert body["detectedLanguage"] == [{"confidence": 100.0, "language": "en"}] * 3
    form = libretranslate_client.post(
        f"{BASE}/translate", data={"q": SENTENCES[0], "source": "en", "target": "de"}
    )
    assert form.json()["translatedText"] == ours[0].text
    multipart = libretranslate_client.post(
        f"{BASE}/translate", files={"q": (None, SENTENCES[0]), "source": (None, "en"), "target": (None, "de")}
    )
    assert multipart.json()["translatedText"] == ours[0].text


@pytest.mark.parametrize(
    "fmt, q",
    [
        ("text", f"{SENTENCES[0].upper()}. {SENTENCES[1]}.\n\n{SENTENCES[2]}"),
        (
            "html",
            f"<p>{SENTENCES[0]} <b>{SENTENCES[7]}</b> {SENTENCES[5]}</p>\n<ul><li>{SENTENCES[3]}</li></ul>",
        ),
    ],
)
def test_text_and_html_are_translated_as_nmts_own_api_translates_real_text(libretranslate_client, fmt, q):
    """Sentences split, ALL CAPS recased, inline tags placed around the aligned words: what
    POST /translate does with format text or html (nmt.serve.real_text)."""
    ours = libretranslate_client.post("/translate", json={"text": q, "format": fmt}).json()["translations"][0]
    r = libretranslate_client.post(
        f"{BASE}/translate", json={"q": q, "source": "en", "target": "de", "format": fmt}
    )
    assert r.json() == {"translatedText": ours["text"], "confidence": ours["confidence"]}
    ours = ours["text"]
    if fmt == "html":
        assert ours.count("<b>") == ours.count("</b>") == 1 and ours.startswith("<p>") and "<li>" in ours


def test_alternatives_in_html_go_through_the_same_projection_and_keep_every_tag_byte_for_byte(
    libretranslate_client,
):
    q = f'<p>{SENTENCES[0]}</p><!-- a cat --><b>{SENTENCES[7]}</b> <a title="x>&quot; y">{SENTENCES[3]}</a>'
    body = {"q": q, "source": "en", "target": "de", "format": "html", "alternatives": 1}
    r = libretranslate_client.post(f"{BASE}/translate", json=body)
    ours = libretranslate_client.post("/translate", json={"text": q, "format": "html", "nbest": 2})
    nbest = [a["text"] for a in ours.json()["translations"][0]["nbest"]]
    assert r.json() == {
        "translatedText": nbest[0],
        "alternatives": nbest[1:],
        "confidence": ours.json()["translations"][0]["confidence"],
    }
    for text in nbest:  # the attribute's > and entity are markup, never translated text
        assert '<a title="x>&quot; y">' in text and text.count("</a>") == 1
        assert text.startswith("<p>") and "<!-- a cat -->" in text and text.count("<b>") == 1


@pytest.mark.parametrize(
    "body, status, message",
    [
        ({"source": "en", "target": "de"}, 400, "Invalid request: missing q parameter"),
        ({"q": "a cat", "target": "de"}, 400, "Invalid request: missing source parameter"),
        ({"q": "a cat", "source": "en"}, 400, "Invalid request: missing target parameter"),
        ({"q": "a cat", "source": "fr", "target": "de"}, 400, "fr is not supported"),
        ({"q": "a cat", "source": "en", "target": "xx"}, 400, "xx is not supported"),
        ({"q": "a cat", "source": "de", "target": "en"}, 400, "de is not supported"),
        ({"q": "a cat", "source": "en", "target": "de", "format": "pdf"}, 400, "pdf format is not supported"),
        ({"q": 3, "source": "en", "target": "de"}, 400, "q must be a string or a list of strings"),
        ({"q": "a cat", "source": "en", "target": "de", "alternatives": "x"}, 400, "is not a number"),
        ({"q": "a " * 300, "source": "en", "target": "de"}, 400, "exceeds text limit (500)"),
        ({"q": ["a cat"] * 21, "source": "en", "target": "de"}, 400, "exceeds text limit (20)"),
    ],
)
def test_errors_are_libretranslates_json_and_statuses(libretranslate_client, body, status, message):
    r = libretranslate_client.post(f"{BASE}/translate", json=body)
    assert r.status_code == status and message in r.json()["error"], r.text
    assert set(r.json()) == {"error"}


def test_unreadable_bodies_and_unknown_paths_are_libretranslate_errors(libretranslate_client, run_dir):
    bad = libretranslate_client.post(
        f"{BASE}/translate", content=b"{", headers={"Content-Type": "application/json"}
    )
    assert bad.status_code == 400 and set(bad.json()) == {"error"}
    assert libretranslate_client.post(f"{BASE}/translate", json=["a cat"]).json() == {
        "error": "Invalid JSON format"
    }
    assert libretranslate_client.get(f"{BASE}/nothing").status_code == 404 and set(
        libretranslate_client.get(f"{BASE}/nothing").json()
    ) == {"error"}
    assert libretranslate_client.post(f"{BASE}/detect", json={}).json() == {
        "error": "Invalid request: missing q parameter"
    }
    assert (
        libretranslate_client.post("/translate", json={"q": "a cat"}).json()["error"]["status"] == 422
    )  # nmt's API unchanged


def lt_body(q: str) -> dict:
    return {"q": q, "source": "en", "target": "de"}


def test_a_full_queue_is_libretranslates_429_slowdown_with_retry_after(run_dir):
    """nmt's 503 for a full queue (--max-queue 1: one request searched, one waiting) is
    LibreTranslate's 429, its message beginning "Slowdown: ", the Retry-After kept."""
    app, models = make_app(run_dir, "--max-queue", "1")
    batcher = models["tiny"].batcher
    release, entered = hold_worker(batcher)
    with TestClient(app) as c, ThreadPoolExecutor(2) as pool:
        try:
            first = pool.submit(c.post, f"{BASE}/translate", json=lt_body("a dog"))
            assert entered.wait(30)  # the worker holds the first request
            second = pool.submit(c.post, f"{BASE}/translate", json=lt_body("a cat"))
            deadline = time.monotonic() + 30
            while batcher.queue_length < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            r = c.post(f"{BASE}/translate", json=lt_body("the tree"))
        finally:
            release.set()
        assert r.status_code == 429 and r.headers["retry-after"] == "1", r.text
        assert set(r.json()) == {"error"} and r.json()["error"].startswith("Slowdown: queue full: "), r.text
        assert first.result().status_code == second.result().status_code == 200


def test_no_answer_in_time_is_libretranslates_500_and_a_too_large_body_its_400(run_dir, run_dir_translator):
    """nmt's 504 (no answer within --timeout: the search is paused at its first step) is
    LibreTranslate's 500, and 413 (a body over --max-body-bytes) its 400, each as {"error": ...}."""
    app, models = make_app(run_dir, limits=Limits(timeout=0.5, max_body_bytes=1000))
    t, model = stepped(run_dir_translator, pause_at=1)
    models["tiny"].batcher.translator = t
    with TestClient(app) as c:
        try:
            r = c.post(f"{BASE}/translate", json=lt_body(SENTENCES[0]))
        finally:
            model.resume.set()
        assert r.status_code == 500 and r.json() == {
            "error": "no answer within 0.5 s (--timeout); the request was cancelled"
        }
        r = c.post(f"{BASE}/translate", json=lt_body("a dog " * 300))
        assert r.status_code == 400 and set(r.json()) == {"error"}, r.text
        assert r.json()["error"].endswith("at most 1,000 (--max-body-bytes)"), r.text


def test_detect_ranks_by_the_share_of_characters_the_vocabulary_holds(libretranslate_client):
    r = libretranslate_client.post(f"{BASE}/detect", data={"q": "a cat 猫猫猫猫"})
    assert r.json() == [{"confidence": 50.0, "language": "en"}]


def test_frontend_settings_name_the_first_pair_and_the_limits(libretranslate_client):
    settings = libretranslate_client.get(f"{BASE}/frontend/settings").json()
    assert settings["charLimit"] == 500 and settings["keyRequired"] is False
    assert settings["language"] == {
        "source": {"code": "en", "name": "English"},
        "target": {"code": "de", "name": "German"},
    }


@pytest.mark.parametrize(
    "value, message",
    [
        (b'"alternatives": Infinity', "Invalid request: alternatives parameter is not a number"),
        (b'"alternatives": -Infinity', "Invalid request: alternatives parameter is not a number"),
        (b'"alternatives": 1e400', "Invalid request: alternatives parameter is not a number"),
        (b'"alternatives": NaN', "Invalid request: alternatives parameter is not a number"),
        (b'"alternatives": true', "Invalid request: alternatives parameter is not a number"),
        (b'"alternatives": [1]', "Invalid request: alternatives parameter is not a number"),
        (b'"alternatives": {"n": 1}', "Invalid request: alternatives parameter is not a number"),
        (b'"alternatives": "1e400"', "Invalid request: alternatives parameter is not a number"),
        (b'"alternatives": "\\ud800"', "Invalid request: alternatives parameter: a lone surrogate"),
        (
            b'"q": "a \\ud800 cat"',
            "Invalid request: q parameter: a lone surrogate '\\ud800' at character 2 is not Unicode text",
        ),
        (b'"q": ["a cat", "\\udfff"]', "Invalid request: q parameter, text 2: a lone surrogate '\\udfff'"),
        (b'"q": [["a cat"]]', "Invalid request: q must be a string or a list of strings"),
        (b'"source": "\\ud800"', "Invalid request: source parameter: a lone surrogate '\\ud800'"),
        (b'"target": "de\\udc80"', "Invalid request: target parameter: a lone surrogate '\\udc80'"),
        (b'"format": "\\ud800"', "Invalid request: format parameter: a lone surrogate"),
        (b'"api_key": "\\ud800"', "Invalid request: api_key parameter: a lone surrogate"),
        (b'"source": 5', "Invalid request: source parameter must be a string"),
        (b'"source": ["en"]', "Invalid request: source parameter must be a string"),
        (b'"target": {"code": "de"}', "Invalid request: target parameter must be a string"),
        (b'"format": ["text"]', "Invalid request: format parameter must be a string"),
        (b'"api_key": 1234', "Invalid request: api_key parameter must be a string"),
    ],
)
def test_a_malformed_json_value_is_a_400_naming_it_never_a_500(libretranslate_client, value, message):
    """Each value replaces one of a valid request's (the later of two equal JSON keys wins)."""
    body = b'{"q": "a cat", "source": "en", "target": "de", ' + value + b"}"
    r = libretranslate_client.post(
        f"{BASE}/translate", content=body, headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 400 and set(r.json()) == {"error"} and r.json()["error"].startswith(message), (
        r.text
    )
    if not value.startswith(b'"alternatives"'):  # /detect reads the same parameters, alternatives aside
        r = libretranslate_client.post(
            f"{BASE}/detect", content=body, headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 400 and r.json()["error"].startswith(message), r.text


def test_alternatives_are_read_as_libretranslate_reads_them(libretranslate_client):
    """int() of the value: "1", 1.7 -> 1; below 0 or null -> none."""
    for value, n in (("1", 1), (1.7, 1), (-3, 0), (None, 0)):
        body = {"q": SENTENCES[0], "source": "en", "target": "de", "alternatives": value}
        r = libretranslate_client.post(f"{BASE}/translate", json=body)
        assert r.status_code == 200 and len(r.json().get("alternatives", [])) <= n, (value, r.text)
        assert ("alternatives" in r.json()) == (n > 0)


def nested_multipart(depth: int) -> bytes:
    """A form-data body whose one field lies in ``depth`` multiparts, each inside the one before."""
    body = b"".join(
        f"--b{i}\r\nContent-Type: multipart/mixed; boundary=b{i + 1}\r\n\r\n".encode() for i in range(depth)
    )
    body += (
        f'--b{depth}\r\nContent-Disposition: form-data; name="q"\r\n\r\na cat\r\n--b{depth}--\r\n'.encode()
    )
    return body + b"".join(f"--b{i}--\r\n".encode() for i in reversed(range(depth)))


def test_forms_of_many_parts_deep_nesting_or_only_separators_are_read_or_a_400():
    """body_params on bodies of about 1 MiB (--max-body-bytes): each is read (email.parser and
    parse_qsl take time linear in the size) or refused as a 400 naming the reason, never a 500."""
    from nmt.serve.errors import ApiError
    from nmt.serve.libretranslate import body_params

    form = "multipart/form-data; boundary=b"
    part = b'--b\r\nContent-Disposition: form-data; name="q"\r\n\r\na cat\r\n'
    assert body_params(form, part * 20_000 + b"--b--\r\n") == {"q": "a cat"}
    assert body_params(form, b"--" + b"b" * 1_000_000 + b"\r\n" + part + b"--b--\r\n") == {"q": "a cat"}
    assert body_params("multipart/form-data; boundary=b0", nested_multipart(50)) == {"q": "a cat"}
    with pytest.raises(ApiError) as e:
        body_params("multipart/form-data; boundary=b0", nested_multipart(2000))
    assert e.value.status == 400 and "(RecursionError" in e.value.message
    with pytest.raises(ApiError) as e:
        body_params(form, b'--b\r\nContent-Disposition: form-data; name="q"\r\n\r\na \xff cat\r\n--b--\r\n')
    assert e.value.status == 400 and "(UnicodeDecodeError" in e.value.message
    rfc2231 = b"--b\r\nContent-Disposition: form-data; name*=utf-8''q%C3%BC\r\n\r\nx\r\n--b--\r\n"
    assert body_params(form, rfc2231) == {"qü": "x"}
    urlencoded = "application/x-www-form-urlencoded"
    assert body_params(urlencoded, b"&" * 1_000_000) == {}
    assert body_params(urlencoded, b"%" * 1_000_000) == {"%" * 1_000_000: ""}
    assert body_params(urlencoded, b"q=%ff%fe&" * 100_000) == {"q": "\ufffd\ufffd"}


def test_a_malicious_form_through_the_server_is_a_libretranslate_400(libretranslate_client):
    for content_type, body, message in (
        (
            "multipart/form-data; boundary=b0",
            nested_multipart(2000),
            "Invalid request: the body cannot be read",
        ),
        ("application/x-www-form-urlencoded", b"%" * 1_000_000, "Invalid request: missing q parameter"),
        ("application/x-www-form-urlencoded", b"&" * 1_000_000, "Invalid request: missing q parameter"),
    ):
        r = libretranslate_client.post(
            f"{BASE}/translate", content=body, headers={"Content-Type": content_type}
        )
        assert r.status_code == 400 and set(r.json()) == {"error"} and r.json()["error"].startswith(message)
