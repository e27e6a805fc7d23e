"""nmt/serve/validation.py: a request read and checked before it is queued; each bad field a 4xx naming it."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi", reason="nmt[serve] not installed (pip install 'nmt[serve]')")


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
        (b'{"text": "a", "beam": 2, "nbest": 3}', 422, "nbest=3: must be between 1 and beam=2"),
        (
            b'{"text": "a", "beam": 1, "mbr": true}',
            422,
            "mbr chooses among the beam's n-best: needs beam >= 2",
        ),
        (b'{"text": "a", "beam": 4, "nbest": 2, "mbr": true}', 422, "needs nbest 1 (got nbest 2)"),
        (b'{"text": "a", "model": "fr-en"}', 404, "unknown model 'fr-en' (serving: tiny)"),
        (json.dumps({"text": ["a"] * 21}).encode(), 413, "21 texts: at most 20"),
        (json.dumps({"text": "a" * 501}).encode(), 413, "501 characters: at most 500"),
    ],
)
def test_translate_errors(serve_client, body, status, message):
    r = serve_client.post("/translate", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status
    assert r.json()["error"]["status"] == status and message in r.json()["error"]["message"]


def test_a_lone_surrogate_in_a_constraint_is_a_422_naming_it(serve_client):
    """A constraint phrase holding a lone surrogate (a JSON escape) is refused as text is: 422, not
    a 500 from the tokenizer."""
    body = b'{"text": ["a dog", "a cat"], "constraints": [["goden"], ["x\\udc80"]]}'
    r = serve_client.post("/translate", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422
    assert r.json()["error"] == {
        "status": 422,
        "message": "constraints: sentence 2, phrase 1: a lone surrogate '\\udc80' at character 1 "
        "is not Unicode text",
    }


@pytest.mark.parametrize("path", ["/translate", "/attention"])
def test_a_number_too_long_to_read_is_a_400(serve_client, path):
    """An integer of more digits than Python reads (4300) is a 400 naming the problem, not a 500."""
    body = b'{"text": "a", "beam": ' + b"9" * 5000 + b"}"
    r = serve_client.post(path, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith("request body holds a number too long to read (")
