"""nmt/serve/guard.py, the middleware of `nmt serve`: body size, nesting, Content-Type, Host and paths
checked; a failure in the worker a counted JSON 500."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi", reason="nmt[serve] not installed (pip install 'nmt[serve]')")
from fastapi.testclient import TestClient  # noqa: E402
from serve_fixtures import SENTENCES, make_app  # noqa: E402

from nmt.serve.app import Limits  # noqa: E402


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
