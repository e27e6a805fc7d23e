"""API fuzzing of `nmt serve` with schemathesis against its own OpenAPI schema: for
requests made from the schema, valid and invalid, every answer has a documented status, is JSON
where the schema says so and matches the documented body, and none is a 500. LibreTranslate's
routes, which read their parameters from JSON, a form or the query string rather than from a
schema, are fuzzed with hypothesis: plausible and arbitrary values (lone surrogates, NaN, nesting)
sent each way, and arbitrary bodies; every answer is a 200 of LibreTranslate's shape or a 400
``{"error": str}``. The server is healthy afterwards. Bounded: a fixed number of examples per
operation (derandomized), a tiny model and small limits, so that it runs in seconds."""

from __future__ import annotations

import argparse
import json
from urllib.parse import urlencode

import pytest

pytest.importorskip("fastapi", reason="nmt[serve] not installed (pip install 'nmt[serve]')")
schemathesis = pytest.importorskip(
    "schemathesis", reason="schemathesis not installed (pip install 'nmt[test]')"
)
from fastapi.testclient import TestClient  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
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


# ------------------------------------------------------------------------ LibreTranslate's routes
TEXT = st.text(st.characters(exclude_categories=()), max_size=12)  # lone surrogates too
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
PLAUSIBLE = {
    "q": st.sampled_from([*SENTENCES, "<p>a <b>cat</b></p>", "A CAT. a dog!"])
    | st.lists(st.sampled_from(SENTENCES), max_size=3),
    "source": st.sampled_from(["en", "en", "en", "auto", "de", ""]),
    "target": st.sampled_from(["de", "de", "de", "en", "xx"]),
    "format": st.sampled_from(["text", "html", "xml"]),
    "alternatives": st.sampled_from([0, 1, "2", 31, 32, -1, 1.5]),
    "api_key": st.sampled_from(["", "key"]),
}


# the values that broke LibreTranslate's routes before (a 500): infinities (1e400 in JSON), lone
# surrogates, strings' places taken by other JSON values
EDGES = [
    float("inf"),
    float("-inf"),
    float("nan"),
    1e308,
    True,
    10**30,
    "\ud800",
    "a\udfff",
    [],
    {},
    ["en"],
    {"a": 1},
]
ANY_JSON = object()  # in place of an edge: any JSON value (JSON_VALUE)


@st.composite
def libretranslate_params(draw) -> dict:
    """A request of plausible parameters (q, source and target always), half the time with one
    parameter given a value of EDGES or any JSON value."""
    params = draw(
        st.fixed_dictionaries(
            {name: PLAUSIBLE[name] for name in ("q", "source", "target")},
            optional={name: PLAUSIBLE[name] for name in ("format", "alternatives", "api_key")},
        )
    )
    if draw(st.booleans()):
        value = draw(st.sampled_from([*EDGES, ANY_JSON, ANY_JSON]))
        params[draw(st.sampled_from(sorted(PLAUSIBLE)))] = draw(JSON_VALUE) if value is ANY_JSON else value
    return params


def send(client: TestClient, path: str, params: dict, encoding: str):
    """POST ``params`` as JSON, as an urlencoded or multipart form, or in the query string (in a
    form, a value is its str(); a lone surrogate is sent as the bytes Python's surrogatepass writes)."""
    if encoding == "json":
        body = json.dumps(params).encode()
        return client.post(path, content=body, headers={"Content-Type": "application/json"})
    fields = [(name, str(value)) for name, value in params.items()]
    if encoding == "query":
        return client.post(f"{path}?{urlencode(fields, errors='surrogatepass')}")
    if encoding == "urlencoded":
        body = urlencode(fields, errors="surrogatepass").encode()
        return client.post(path, content=body, headers={"Content-Type": "application/x-www-form-urlencoded"})
    parts = [f'--B\r\nContent-Disposition: form-data; name="{n}"\r\n\r\n{v}\r\n' for n, v in fields]
    body = ("".join(parts) + "--B--\r\n").encode("utf-8", "surrogatepass")
    return client.post(path, content=body, headers={"Content-Type": "multipart/form-data; boundary=B"})


def check_libretranslate_answer(response, path: str) -> None:
    """A 200 of LibreTranslate's shape for ``path``, or a 400 ``{"error": str}``."""
    assert response.status_code in (200, 400), response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    if response.status_code == 400:
        assert isinstance(body, dict) and set(body) == {"error"} and isinstance(body["error"], str)
    elif path.endswith("/translate"):
        assert set(body) <= {"translatedText", "alternatives", "detectedLanguage", "confidence"}, body
        texts = body["translatedText"]
        assert isinstance(texts, str) or all(isinstance(t, str) for t in texts)
    elif path.endswith("/detect"):
        assert all(set(d) == {"confidence", "language"} and 0 <= d["confidence"] <= 100 for d in body)
    else:
        assert all(set(d) == {"code", "name", "targets"} for d in body)


FUZZ = settings(
    max_examples=80, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)


@pytest.mark.parametrize("sent_as", ["json", "form"])
@pytest.mark.parametrize("path", ["/libretranslate/translate", "/libretranslate/detect"])
def test_libretranslate_answers_any_parameters_with_its_json_and_never_a_500(fuzzed_app, path, sent_as):
    """Parameters sent as JSON, or as a form (urlencoded, multipart or in the query string)."""
    statuses = []
    encodings = ["json"] if sent_as == "json" else ["urlencoded", "multipart", "query"]
    with TestClient(fuzzed_app, raise_server_exceptions=False) as client:

        @given(params=libretranslate_params(), encoding=st.sampled_from(encodings))
        @FUZZ
        def check(params, encoding):
            response = send(client, path, params, encoding)
            check_libretranslate_answer(response, path)
            statuses.append(response.status_code)

        check()
    assert statuses.count(200) >= 5  # valid requests were answered too


@pytest.mark.parametrize(
    "method, path",
    [
        ("POST", "/libretranslate/translate"),
        ("POST", "/libretranslate/detect"),
        ("GET", "/libretranslate/languages"),
    ],
)
def test_libretranslate_answers_any_body_and_query_with_its_json_and_never_a_500(fuzzed_app, method, path):
    content_types = [
        "application/json",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=B",
    ]
    with TestClient(fuzzed_app, raise_server_exceptions=False) as client:

        @given(
            content_type=st.sampled_from([*content_types, "multipart/form-data", "text/plain", ""]),
            body=st.binary(max_size=200) | TEXT.map(lambda t: t.encode("utf-8", "surrogatepass")),
            query=st.dictionaries(st.sampled_from(list(PLAUSIBLE)), TEXT, max_size=3),
        )
        @FUZZ
        def check(content_type, body, query):
            url = f"{path}?{urlencode(query, errors='surrogatepass')}"
            headers = {"Content-Type": content_type} if content_type else {}
            response = client.request(method, url, content=body, headers=headers)
            check_libretranslate_answer(response, path)

        check()


def test_the_server_is_healthy_after_the_fuzzing(fuzzed_app):
    """Runs after the fuzz tests (file order): nothing is left in the queue; the app, started
    again, answers /health and translates."""
    batcher = next(iter(fuzzed_app.state.serve.models.values())).batcher
    assert batcher.queue_length == 0 and batcher.queue_work == 0
    with TestClient(fuzzed_app) as client:
        assert client.get("/health").json()["status"] == "ok"
        r = client.post("/translate", json={"text": SENTENCES[0]})
        assert r.status_code == 200 and r.json()["translations"][0]["text"]
