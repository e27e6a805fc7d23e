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
are translated as nmt's own /translate translates real text (nmt.serve.real_text: sentences split,
recased, inline tags placed by the alignment); with alternatives, or a target tag, each line is one
sentence and HTML keeps its tags around the text it translates (nmt/serve/segments.py). Detection
cannot tell languages of one script apart: it ranks the source languages served by the share of
the text's characters in each one's vocabulary (the confidence, 0 to 100). With ``--api-key`` a
translation or detection needs the key (``api_key``, or the headers of nmt's API): missing is a
400, wrong a 403; /languages and /frontend/settings stay open, as in LibreTranslate.

Errors are LibreTranslate's ``{"error": "..."}``: 400 for a missing or wrong parameter, an
unknown language or pair, a text over the limits; 403 for a wrong API key; 429 for a full queue;
500 for a failure or no answer in time (nmt/serve/errors.py maps nmt's statuses)."""

from __future__ import annotations

import email.parser
import functools
import hmac
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ..infer.options import SearchOptions
from ..infer.real_text import PROJECTION_DIAGONAL
from ..languages import language_name
from ..vocab import target_tag
from .batcher import JobOptions
from .errors import LIBRETRANSLATE_PREFIX, ApiError
from .real_text import text_body, text_job
from .routes import answer
from .schemas import TranslateRequest
from .segments import Template, html_template, plain_template
from .state import ServedModel, ServeState, serve_state
from .validation import check_text, check_work, search_alpha, torch_model

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
def multipart_fields(content_type: str, body: bytes) -> list[tuple[str, str]]:
    """The text fields of a multipart/form-data body."""
    message = email.parser.BytesParser().parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
    fields = []
    for part in message.walk() if message.is_multipart() else []:
        name = part.get_param("name", header="content-disposition")
        if name is not None and not part.is_multipart():
            fields.append((name, part.get_payload(decode=True).decode("utf-8")))
    return fields


async def read_params(request: Request) -> dict[str, Any]:
    """The query string's parameters updated with the body's: a JSON object, or a form (urlencoded
    or multipart); a form's line ends made '\\n'. 400 for a body that cannot be read."""
    params: dict[str, Any] = dict(request.query_params)
    content_type = request.headers.get("content-type", "")
    media = content_type.partition(";")[0].strip().lower()
    body = await request.body()
    try:
        if media == "application/json":
            data = json.loads(body.decode("utf-8"))
            if not isinstance(data, dict):
                raise ApiError(400, "Invalid JSON format")
            return params | data
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
    return params | form


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
    value = params.get("alternatives", 0)
    try:
        n = max(0, int(value))
    except (TypeError, ValueError):
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
    """The model that translates a request, its pair, the source detected (source "auto"), and the
    target-language tag in front of each sentence for a multi-target model."""

    model: ServedModel
    source: str
    target: str
    detected: dict | None = None
    tag: str | None = None


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
    return Route(m, source, target, detected, target_tag(target) if m.info.get("tgt_langs") else None)


# ------------------------------------------------------------------------------------ translate
def real_text_job(texts: list[str], fmt: str, r: Route, n_alternatives: int):
    """The real-text job of nmt's own /translate for these texts (nmt.serve.real_text: sentences
    split, ALL-CAPS recased, long sentences cut at clauses, and for html the inline tags placed
    around the aligned words), or None where each line is translated as one sentence instead
    (nmt/serve/segments.py): alternatives asked, or a target tag (it would shift the alignment)."""
    if n_alternatives or r.tag is not None:
        return None
    defaults = {name: field.default for name, field in TranslateRequest.model_fields.items()}
    req = TranslateRequest(text=texts, format=fmt, split=True, recase=True, max_words=defaults["max_words"])
    return text_job(req, texts, r.model.batcher.translator)


def check_limits(state: ServeState, sentences: list[str]) -> None:
    limits = state.limits
    chars = sum(map(len, sentences))  # first: a text's characters do not depend on how it is cut
    if chars > limits.max_chars:
        raise ApiError(400, f"Invalid request: request ({chars}) exceeds text limit ({limits.max_chars})")
    if len(sentences) > limits.max_sentences:
        raise ApiError(
            400, f"Invalid request: request ({len(sentences)}) exceeds text limit ({limits.max_sentences})"
        )
    check_text(sentences)


def unique(alternatives: list[str], best: str) -> list[str]:
    seen = {best}
    return [a for a in alternatives if not (a in seen or seen.add(a))]


def rendered(
    templates: list[Template], results: list, n_alternatives: int
) -> tuple[list[str], list[list[str]]]:
    """Each text with its best translations put back, and its alternatives: the text with each
    sentence's i-th hypothesis (its best where it has fewer), repeats dropped."""
    texts, alternatives, at = [], [], 0
    for template in templates:
        nbest = results[at : at + len(template.sentences)]
        at += len(template.sentences)
        best = template.render([h[0].text for h in nbest])
        others = [
            template.render([h[min(i, len(h) - 1)].text for h in nbest]) for i in range(1, n_alternatives + 1)
        ]
        texts.append(best)
        alternatives.append(unique(others, best) if nbest else [])
    return texts, alternatives


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
    r = route(state, str(source), str(target), texts)
    job = real_text_job(texts, fmt, r, n_alternatives)
    templates = (
        [] if job is not None else [html_template(t) if fmt == "html" else plain_template(t) for t in texts]
    )
    sentences = (
        job.units
        if job is not None
        else [f"{r.tag} {s}" if r.tag else s for t in templates for s in t.sentences]
    )
    aligned = job is not None and job.needs_alignment and torch_model(r.model)
    check_limits(state, sentences)
    results = []
    if sentences:
        beam = max(BEAM, n_alternatives + 1)
        measured = r.model.batcher.measure(sentences)
        tokens = check_work(measured, beam, max_request_work=state.limits.max_request_work)
        options = JobOptions(
            SearchOptions(beam=beam, alpha=search_alpha(beam, None), nbest=n_alternatives + 1),
            alignment_diagonal=PROJECTION_DIAGONAL if aligned else None,
        )
        results = await answer(
            request, state, r.model, sentences, options, n_tokens=tokens, alignment=aligned
        )
        state.metrics.sentences.labels(model=r.model.name).inc(len(sentences))
    if job is not None:
        truncated = measured.truncated if sentences else []
        out = text_body(r.model.name, job, r.model.batcher.translator, results, truncated)["translations"]
        translated, alternatives = [t["text"] for t in out], []
    else:
        translated, alternatives = rendered(templates, results, n_alternatives)
    single = isinstance(params["q"], str)
    body: dict[str, Any] = {"translatedText": translated[0] if single else translated}
    if n_alternatives:
        body["alternatives"] = alternatives[0] if single else alternatives
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
