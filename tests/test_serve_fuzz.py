"""API fuzzing of `nmt serve` with schemathesis against its own OpenAPI schema: for
requests made from the schema, valid and invalid, every answer has a documented status, is JSON
where the schema says so and matches the documented body, and none is a 500; the server is
healthy afterwards. Bounded: a fixed number of examples per operation (derandomized), a tiny
model and small limits, so that it runs in seconds."""

from __future__ import annotations

import argparse

import pytest

pytest.importorskip("fastapi", reason="nmt[serve] not installed (pip install 'nmt[serve]')")
schemathesis = pytest.importorskip(
    "schemathesis", reason="schemathesis not installed (pip install 'nmt[test]')"
)
from fastapi.testclient import TestClient  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)
from serve_fixtures import SENTENCES  # noqa: E402

from nmt.serve.app import Limits, create_app  # noqa: E402
from nmt.serve.command import add_serve_args, build_models  # noqa: E402

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
LIMITS = Limits(
    max_chars=300,
    max_sentences=8,
    max_request_work=3000,
    max_body_bytes=20_000,
    max_attention_cells=200_000,
    timeout=20,
)


@pytest.fixture(scope="module")
def fuzzed_app(run_dir):
    parser = argparse.ArgumentParser()
    add_serve_args(parser)
    models = build_models({"tiny": run_dir}, parser.parse_args([f"tiny={run_dir}"]))
    return create_app(models, limits=LIMITS)


@pytest.fixture(scope="module")
def api_schema(fuzzed_app):
    return schemathesis.openapi.from_asgi("/openapi.json", fuzzed_app)


@pytest.mark.parametrize("mode", ["positive", "negative"])
@pytest.mark.parametrize(
    "method, path",
    [
        ("POST", "/translate"),
        ("POST", "/attention"),
        ("GET", "/health"),
        ("GET", "/models"),
        ("GET", "/metrics"),
    ],
)
def test_every_answer_is_documented_json_and_never_a_500(api_schema, method, path, mode):
    operation = api_schema[path][method]
    if mode == "negative" and method == "GET":
        pytest.skip("no parameters and no body: nothing to make invalid")
    strategy = operation.as_strategy(generation_mode=GenerationMode(mode))
    statuses = []

    @given(case=strategy)
    @settings(
        max_examples=40,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case):
        response = case.call()
        case.validate_response(response, checks=CHECKS)
        if path != "/metrics":
            assert response.headers["content-type"][0].startswith("application/json")
            response.json()
        statuses.append(response.status_code)

    check()
    assert statuses and (mode == "negative" or 200 in statuses)  # valid requests were translated too
    health = api_schema["/health"]["GET"].Case().call()  # the same server, still healthy
    assert health.status_code == 200 and health.json()["status"] == "ok"


def test_the_server_is_healthy_after_the_fuzzing(fuzzed_app):
    """Runs after the fuzz tests (file order): nothing is left in the queue; the app, started
    again, answers /health and translates."""
    batcher = next(iter(fuzzed_app.state.serve.models.values())).batcher
    assert batcher.queue_length == 0 and batcher.queue_work == 0
    with TestClient(fuzzed_app) as client:
        assert client.get("/health").json()["status"] == "ok"
        r = client.post("/translate", json={"text": SENTENCES[0]})
        assert r.status_code == 200 and r.json()["translations"][0]["text"]
