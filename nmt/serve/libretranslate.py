"""LibreTranslate's API on `nmt serve`, under /libretranslate (nmt's own POST /translate reads
another body): a LibreTranslate client given the base URL ``http://HOST:PORT/libretranslate/``
translates with the models served.

    POST /libretranslate/translate  q (a string, or a list in JSON), source (a code or "auto"),
                                    target, format ("text" | "html"), alternatives, api_key
                                    -> {"translatedText": str | [str, ...], "alternatives"?,
                                        "detectedLanguage"? (source "auto")}
    POST /libretranslate/detect     q -> [{"language": code, "confidence": 0..100}, ...]
    GET  /libretranslate/languages  -> [{"code", "name", "targets": [code, ...]}, ...]
    GET  /libretranslate/frontend/settings

The parameters come as JSON, as a form (urlencoded, as libretranslatepy sends them, or multipart)
or in the query string. A language pair is served by the first model whose checkpoint's data has
that source language and that target language (or, for a model of several target languages, has it
among them: its sentences then start with the target's tag, nmt.data.multilingual). Text and HTML
are translated as nmt's own /translate translates real text, through the one pipeline
(nmt.realtext.pipeline over nmt.serve.real_text: sentences split, recased, inline tags placed by the
alignment); an alternative is the text with each sentence's next hypothesis, its tags placed alike. Detection
cannot tell languages of one script apart: it ranks the source languages served by the share of
the text's characters in each one's vocabulary (the confidence, 0 to 100). With ``--api-key`` a
translation or detection needs the key (``api_key``, or the headers of nmt's API): missing is a
400, wrong a 403; /languages and /frontend/settings stay open, as in LibreTranslate.

Errors are LibreTranslate's ``{"error": "..."}``: 400 for a missing or wrong parameter (a value
of the wrong JSON type, a lone surrogate, a body that cannot be read), an unknown language or pair,
a text over the limits; 403 for a wrong API key, or a POST from a web page of another origin
(nmt/serve/guard.py); 429 for a full queue; 500 for a failure or no answer in time
(nmt/serve/errors.py maps nmt's statuses)."""

from __future__ import annotations

import asyncio
import email.parser
import email.utils
import functools
import hmac
import json
import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ..infer.options import SearchOptions
from ..languages import language_name
from ..realtext.job import TextOptions
from ..realtext.pipeline import TranslationRequest
from .errors import LIBRETRANSLATE_PREFIX, ApiError
from .real_text import run_request
from .state import ServedModel, ServeState, serve_state
from .validation import check_text, check_unicode

router = APIRouter(prefix=LIBRETRANSLATE_PREFIX, tags=["LibreTranslate"])

BEAM = 4  # the paper's beam (nmt's default)


# ----------------------------------------------------------------------------------- languages
def model_languages(m: ServedModel) -> tuple[str | None, list[str]]:
    """A model's source language and its target languages (none known: None, [])."""
    targets = m.info.get("tgt_langs") or ([m.info["tgt_lang"]] if m.info.get("tgt_lang") else [])
    return m.info.get("src_lang"), list(targets)


def language_pairs(state: ServeState) -> dict[str, dict[str, ServedModel]]:
    """source -> target -> the first model that translates it."""
    pairs: dict[str, dict[str, ServedModel]] = {}
    for m in state.models.values():
        source, targets = model_languages(m)
        if source is not None:
            for target in targets:
                pairs.setdefault(source, {}).setdefault(target, m)
    return pairs


# -------------------------------------------------------------------------------------- request
# the parameters read as strings (q: a string or a list of strings; alternatives: a number)
TEXT_PARAMS = ("source", "target", "format", "api_key")


def field_name(part) -> str | None:
    """The name of a multipart part, RFC 2231's ``name*=utf-8''...`` decoded (the email parser
    gives it as a tuple)."""
    name = part.get_param("name", header="content-disposition")
    return None if name is None else email.utils.collapse_rfc2231_value(name)


def multipart_fields(content_type: str, body: bytes) -> list[tuple[str, str]]:
    """The text fields of a multipart/form-data body. The email parser reads it in time linear in
    its size (parts, lines, header and boundary lengths); a multipart nested in a multipart ~1,000
    deep is a RecursionError (a 400 in read_params)."""
    message = email.parser.BytesParser().parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    fields = []
    for part in message.walk() if message.is_multipart() else []:
        name = field_name(part)
        if name is not None and not part.is_multipart():
            fields.append((name, part.get_payload(decode=True).decode("utf-8")))
    return fields


def checked_params(params: dict[str, Any]) -> dict[str, Any]:
    """``params``, or 400 for a parameter read as a string that is another JSON value (a number, a
    list, an object) and for a lone surrogate (a JSON escape: no Unicode text, and it could not be
    written back in an error message) in q, alternatives or those strings."""
    for name in TEXT_PARAMS:
        if params.get(name) is not None and not isinstance(params[name], str):
            raise ApiError(400, f"Invalid request: {name} parameter must be a string")
    for name in ("q", "alternatives", *TEXT_PARAMS):
        value = params.get(name)
        strings = value if isinstance(value, list) else [value]
        for i, s in enumerate(strings):
            if isinstance(s, str):
                where = f", text {i + 1}" if isinstance(value, list) else ""
                check_unicode(s, f"Invalid request: {name} parameter{where}")
    return params


async def read_params(request: Request) -> dict[str, Any]:
    """The query string's parameters updated with the body's (body_params), checked
    (checked_params)."""
    params: dict[str, Any] = dict(request.query_params)
    body = await request.body()
    # a form of 1 MiB can take a second to parse (a million percent signs, thousands of parts): in
    # a thread, so that the event loop goes on answering the other requests meanwhile
    data = await asyncio.to_thread(body_params, request.headers.get("content-type", ""), body)
    return checked_params(params | data)


def body_params(content_type: str, body: bytes) -> dict[str, Any]:
    """A body's parameters: a JSON object, or a form (urlencoded or multipart) whose line ends are
    made '\\n'. 400 for a body that cannot be read."""
    media = content_type.partition(";")[0].strip().lower()
    try:
        if media == "application/json":
            data = json.loads(body.decode("utf-8"))
            if not isinstance(data, dict):
                raise ApiError(400, "Invalid JSON format")
            return data
        if media == "multipart/form-data":
            fields = multipart_fields(content_type, body)
        elif not body or media in ("", "application/x-www-form-urlencoded"):
            fields = parse_qsl(body.decode("utf-8"), keep_blank_values=True)
        else:
            raise ApiError(400, f"Content-Type {media!r}: send JSON or a form")
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ApiError(400, f"Invalid request: the body cannot be read ({type(e).__name__}: {e})") from None
    form = {}
    for name, value in fields:
        form.setdefault(name, value.replace("\r\n", "\n").replace("\r", "\n"))
    return form


def check_api_key(state: ServeState, request: Request, params: dict) -> None:
    """With --api-key: 400 without a key (``api_key`` or nmt's headers), 403 for a wrong one."""
    if state.api_key is None:
        return
    given = params.get("api_key")
    sent = given.encode("utf-8") if isinstance(given, str) else None
    if not given:  # the headers of nmt's API: values Starlette decoded as latin-1, compared as bytes
        header = request.headers.get("x-api-key")
        auth = request.headers.get("authorization", "")
        if header is None and auth.lower().startswith("bearer "):
            header = auth[7:].strip()
        sent = header.encode("latin-1") if header else None
    if not sent:
        raise ApiError(400, "Please contact the server operator to get an API key")
    if not hmac.compare_digest(sent, state.api_key.encode("utf-8")):
        raise ApiError(403, "Invalid API key")


def required(params: dict, name: str) -> Any:
    value = params.get(name)
    if value is None or value == "" or value == []:
        raise ApiError(400, f"Invalid request: missing {name} parameter")
    return value


def texts_of(q: Any) -> list[str]:
    if isinstance(q, str):
        return [q]
    if isinstance(q, list) and all(isinstance(t, str) for t in q):
        return q
    raise ApiError(400, "Invalid request: q must be a string or a list of strings")


def alternatives_of(params: dict) -> int:
    """``alternatives`` as LibreTranslate reads it (int(): "3", 3, 3.7 -> 3; below 0 -> 0; null:
    0), or 400 for what is not a number: true, a list, an object, NaN, infinity (1e400 in JSON)."""
    value = params.get("alternatives")
    if value is None:
        return 0
    try:
        if isinstance(value, bool) or isinstance(value, float) and not math.isfinite(value):
            raise ValueError(value)
        n = max(0, int(value))
    except (TypeError, ValueError, OverflowError):
        raise ApiError(400, "Invalid request: alternatives parameter is not a number") from None
    if n + 1 > 32:
        raise ApiError(400, "Invalid request: alternatives parameter must be <= 31")
    return n


# -------------------------------------------------------------------------------------- detect
@functools.lru_cache(maxsize=64)
def vocabulary_characters(sp) -> frozenset[str]:
    """The characters of a SentencePiece model's pieces."""
    return frozenset("".join(sp.id_to_piece(i) for i in range(sp.get_piece_size())))


def detect(state: ServeState, text: str) -> list[dict]:
    """The source languages served, best first, each with the percentage of the text's characters
    (spaces aside) that its model's vocabulary holds. 400 when no model knows its source language."""
    chars = [c for c in text if not c.isspace()]
    found = []
    for source, targets in language_pairs(state).items():
        sp = getattr(next(iter(targets.values())).batcher.translator, "sp", None)
        known = vocabulary_characters(sp) if sp is not None else frozenset()
        share = sum(c in known for c in chars) / len(chars) if chars else 0.0
        found.append({"confidence": round(100.0 * share, 1), "language": source})
    if not found:
        raise ApiError(400, "cannot detect a language: no model served knows its source language")
    return sorted(found, key=lambda d: -d["confidence"])


@dataclass
class Route:
    """The model that translates a request, its pair (the target: the pipeline's target language),
    and the source detected (source "auto")."""

    model: ServedModel
    source: str
    target: str
    detected: dict | None = None


def route(state: ServeState, source: str, target: str, texts: list[str]) -> Route:
    """The model of a source and target (400 naming what is not served)."""
    pairs = language_pairs(state)
    detected = None
    if source == "auto":
        detected = detect(state, "\n".join(texts))[0]
        source = detected["language"]
    if source not in pairs:
        raise ApiError(400, f"{source} is not supported")
    if target not in pairs[source]:
        known = {t for targets in pairs.values() for t in targets} | set(pairs)
        if target not in known:
            raise ApiError(400, f"{target} is not supported")
        raise ApiError(
            400,
            f"{language_name(target)} ({target}) is not available as a target language from "
            f"{language_name(source)} ({source})",
        )
    m = pairs[source][target]
    return Route(m, source, target, detected)


# ------------------------------------------------------------------------------------ translate
def check_limits(state: ServeState, texts: list[str]) -> None:
    """The texts as sent, markup included, before anything parses them: LibreTranslate's 400 for
    more characters or texts than the limits (its wording), or a string that is not Unicode."""
    limits = state.limits
    chars = sum(map(len, texts))
    if chars > limits.max_chars:
        raise ApiError(400, f"Invalid request: request ({chars}) exceeds text limit ({limits.max_chars})")
    if len(texts) > limits.max_sentences:
        raise ApiError(
            400, f"Invalid request: request ({len(texts)}) exceeds text limit ({limits.max_sentences})"
        )
    check_text(texts)


@router.post("/translate")
async def translate(request: Request) -> Response:
    """LibreTranslate's translation: ``q`` (a string or a list of strings), ``source`` (or
    "auto"), ``target``, ``format`` (text or html), ``alternatives``, ``api_key``."""
    state = serve_state(request)
    params = await read_params(request)
    check_api_key(state, request, params)
    texts = texts_of(required(params, "q"))
    source, target = required(params, "source"), required(params, "target")
    n_alternatives = alternatives_of(params)
    fmt = params.get("format") or "text"
    if fmt not in ("text", "html"):
        raise ApiError(400, f"{fmt} format is not supported")
    check_limits(state, texts)
    r = route(state, str(source), str(target), texts)
    beam = max(BEAM, n_alternatives + 1)
    treq = TranslationRequest(
        texts,
        text=TextOptions(format=fmt),
        search=SearchOptions(beam=beam, nbest=n_alternatives + 1),
        target_lang=r.target,
        glossary=state.glossary,
    )
    done = await run_request(request, state, r.model, treq)
    translated = [t.text for t in done.texts]
    alternatives = [[a.text for a in t.nbest[1:]] for t in done.texts]
    single = isinstance(params["q"], str)
    body: dict[str, Any] = {"translatedText": translated[0] if single else translated}
    if n_alternatives:
        body["alternatives"] = alternatives[0] if single else alternatives
    confidence = [None if t.confidence is None else round(t.confidence, 4) for t in done.texts]
    body["confidence"] = confidence[0] if single else confidence  # nmt's (0..1), not LibreTranslate's
    if r.detected is not None:
        body["detectedLanguage"] = r.detected if single else [r.detected] * len(texts)
    return JSONResponse(body)


@router.post("/detect")
async def detect_language(request: Request) -> Response:
    """LibreTranslate's language detection of ``q``: the source languages served, ranked by the
    share of the text's characters in each one's vocabulary (confidence 0 to 100)."""
    state = serve_state(request)
    params = await read_params(request)
    check_api_key(state, request, params)
    texts = texts_of(required(params, "q"))
    check_text(texts)
    return JSONResponse(detect(state, "\n".join(texts)))


@router.get("/languages")
async def languages(request: Request) -> Response:
    """Every language served, each with the languages it translates into."""
    pairs = language_pairs(serve_state(request))
    codes = list(dict.fromkeys([*pairs, *(t for targets in pairs.values() for t in targets)]))
    return JSONResponse(
        [{"code": c, "name": language_name(c), "targets": list(pairs.get(c, {}))} for c in codes]
    )


@router.get("/frontend/settings")
async def frontend_settings(request: Request) -> Response:
    """What LibreTranslate's web page asks its server: limits, keys, the first pair served."""
    state = serve_state(request)
    pairs = language_pairs(state)
    source = next(iter(pairs), "en")
    target = next(iter(pairs.get(source, {})), source)
    return JSONResponse(
        {
            "charLimit": state.limits.max_chars,
            "frontendTimeout": 500,
            "apiKeys": state.api_key is not None,
            "keyRequired": state.api_key is not None,
            "suggestions": False,
            "filesTranslation": False,
            "supportedFilesFormat": [],
            "language": {
                "source": {"code": source, "name": language_name(source)},
                "target": {"code": target, "name": language_name(target)},
            },
        }
    )
