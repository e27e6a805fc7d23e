"""nmt/serve/guard.py, the middleware of `nmt serve`: body size, nesting, Content-Type, Host and paths
checked; a POST from a page of another origin refused; a failure in the worker a counted JSON 500."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi", reason="nmt[serve] not installed (pip install 'nmt[serve]')")
from fastapi.testclient import TestClient  # noqa: E402
from serve_fixtures import SENTENCES, make_app  # noqa: E402

from nmt.serve.app import Limits  # noqa: E402
from nmt.serve.guard import normal_origin  # noqa: E402


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
        assert r.headers["connection"] == "close"  # the body is left unread
        r = c.post(
            "/translate", content=iter([big[:600], big[600:]]), headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 413 and r.headers["connection"] == "close"
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


# ----------------------------------------------------------------------------------- origins
@pytest.mark.parametrize(
    "origin, normal",
    [
        ("HTTPS://Mt.Example.org:443", "https://mt.example.org"),
        ("http://mt.example.org:80/", "http://mt.example.org"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://[::1]:8000", "http://[::1]:8000"),
        ("chrome-extension://abcdef", "chrome-extension://abcdef"),
        ("null", "null"),
        ("mt.example.org", None),
        ("https://mt.example.org/page", None),
        ("https://user@mt.example.org", None),
        ("https://mt.example.org:99999", None),
        ("https://", None),
    ],
)
def test_an_origin_is_compared_in_lower_case_without_its_default_port(origin, normal):
    assert normal_origin(origin) == normal


def test_a_post_from_a_page_of_another_origin_is_a_403_unless_it_is_the_servers_own_or_allowed(run_dir):
    """The TestClient asks as Host 'testserver'. A POST whose Origin is another (or "null") is
    refused before it is read, in each API's error shape; the server's own origin in any scheme,
    an origin of --allow-origin, or no Origin at all (curl, API clients) are served; GET is open."""
    app, _ = make_app(run_dir, allowed_origins=("https://mt.example.org", "chrome-extension://abcdef"))
    lt = {"q": SENTENCES[0], "source": "en", "target": "de"}
    with TestClient(app) as c:
        for origin in (
            "https://evil.example",
            "null",
            "http://testserver.evil.example",
            "https://mt.example.org:8443",
        ):
            r = c.post("/libretranslate/translate", data=lt, headers={"Origin": origin})
            assert r.status_code == 403 and r.json() == {
                "error": f"Origin {origin!r} may not send POST requests here: it is neither this "
                "server's own nor allowed (--allow-origin)"
            }
        r = c.post("/translate", json={"text": SENTENCES[0]}, headers={"Origin": "https://evil.example"})
        assert r.status_code == 403 and r.json()["error"]["status"] == 403
        r = c.post(
            "/libretranslate/detect", data={"q": SENTENCES[0]}, headers={"Origin": "https://evil.example"}
        )
        assert r.status_code == 403
        for origin in (
            "http://testserver",
            "HTTPS://TestServer:443",
            "https://mt.example.org:443",
            "chrome-extension://abcdef",
        ):
            r = c.post("/libretranslate/translate", data=lt, headers={"Origin": origin})
            assert r.status_code == 200 and r.json()["translatedText"], origin
        assert c.post("/libretranslate/translate", data=lt).status_code == 200
        assert (
            c.post(
                "/translate", json={"text": SENTENCES[0]}, headers={"Origin": "http://testserver"}
            ).status_code
            == 200
        )
        r = c.get("/libretranslate/languages", headers={"Origin": "https://evil.example"})
        assert r.status_code == 200
    app, _ = make_app(run_dir, allowed_origins=None)  # --allow-origin '*'
    with TestClient(app) as c:
        r = c.post("/libretranslate/translate", data=lt, headers={"Origin": "https://evil.example"})
        assert r.status_code == 200
