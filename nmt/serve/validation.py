"""Reading and checking a request before it is parsed and queued: the API key (401), the model it
names (404), the JSON body (415, 400, 422), the text, the per-request limits on the text as sent
(413), what the model's engine can do (400) and the terminology constraints. The search and
real-text options are checked once, by nmt.realtext.pipeline."""

from __future__ import annotations

import hmac
import json

from fastapi import Request
from pydantic import BaseModel, ValidationError

from ..infer.options import SearchOptions
from ..infer.results import TranslateError
from .batcher import Measured
from .errors import ApiError
from .schemas import AttentionRequest, TranslateRequest
from .state import Limits, ServedModel, ServeState


def check_key(state: ServeState, request: Request) -> None:
    """401 unless the request carries the API key (Authorization: Bearer, or X-API-Key)."""
    if state.api_key is None:
        return
    given = request.headers.get("x-api-key")
    auth = request.headers.get("authorization", "")
    if given is None and auth.lower().startswith("bearer "):
        given = auth[7:].strip()
    # header values arrive as bytes, which Starlette decodes as latin-1: compare the bytes sent with
    # the key's UTF-8 (the key file's encoding), so that a non-ASCII key can match
    if given is None or not hmac.compare_digest(given.encode("latin-1"), state.api_key.encode("utf-8")):
        raise ApiError(
            401,
            "missing or wrong API key (send 'Authorization: Bearer KEY' or 'X-API-Key: KEY')",
            {"WWW-Authenticate": "Bearer"},
        )


def served_model(state: ServeState, name: str | None) -> ServedModel:
    """The model a request names (None: the default), or 404."""
    if name is None:
        return next(iter(state.models.values()))
    if name not in state.models:
        raise ApiError(404, f"unknown model {name!r} (serving: {', '.join(state.models)})")
    return state.models[name]


async def read_json(request: Request, schema: type[BaseModel]) -> BaseModel:
    """The body as ``schema``: 415 unless it is application/json, 400 for bytes that are not UTF-8
    or JSON (or nested too deeply, or with a number too long to read), 422 naming each field that
    does not fit the schema."""
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != "application/json":
        raise ApiError(415, f"Content-Type {media or 'missing'!r}: send the request as application/json")
    body = await request.body()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ApiError(
            400, f"request body is not valid UTF-8 (byte 0x{body[e.start]:02x} at offset {e.start})"
        )
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ApiError(400, f"request body is not valid JSON: {e}")
    except ValueError as e:  # an integer of more digits than sys.get_int_max_str_digits()
        raise ApiError(400, f"request body holds a number too long to read ({str(e).partition(';')[0]})")
    except RecursionError:
        raise ApiError(400, "request body is nested too deeply") from None
    try:
        return schema.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(map(str, err['loc'])) or 'body'}: {err['msg']}" for err in e.errors()
        )
        raise ApiError(422, problems)
    except RecursionError:
        raise ApiError(400, "request body is nested too deeply") from None


def check_unicode(s: str, where: str) -> None:
    """422 for a string that is not Unicode text (a lone surrogate from a JSON escape); ``where``
    names it in the message."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ApiError(
            422, f"{where}: a lone surrogate {s[e.start]!r} at character {e.start} is not Unicode text"
        ) from None


def check_text(sentences: list[str]) -> None:
    """422 for a sentence that is not Unicode text (a lone surrogate from a JSON escape)."""
    for i, s in enumerate(sentences):
        check_unicode(s, f"text: sentence {i + 1}")


def torch_model(m: ServedModel) -> bool:
    """Attention and alignment need nmt's own model (not the ctranslate2 engine's)."""
    import torch

    return isinstance(getattr(m.batcher.translator, "model", None), torch.nn.Module)


def checked_search(beam: int, alpha: float | None, nbest: int = 1) -> SearchOptions:
    """The SearchOptions a request asks for (422 naming what SearchOptions refuses)."""
    try:
        return SearchOptions(beam=beam, alpha=alpha, nbest=nbest)
    except ValueError as e:
        raise ApiError(422, str(e)) from None


def check_raw_limits(texts: list[str], limits: Limits) -> None:
    """A request's texts as sent, before anything parses them: 413 for more texts or characters
    (markup included) than the limits, 422 for a string that is not Unicode text."""
    if len(texts) > limits.max_sentences:
        raise ApiError(413, f"{len(texts)} texts: at most {limits.max_sentences} per request")
    chars = sum(map(len, texts))
    if chars > limits.max_chars:
        raise ApiError(413, f"{chars} characters: at most {limits.max_chars} per request")
    check_text(texts)


def check_translate(req: TranslateRequest, texts: list[str], m: ServedModel, limits: Limits) -> None:
    """A /translate request's size (413), text (422) and alignment (400), before it is parsed;
    its options are checked by nmt.realtext.pipeline."""
    check_raw_limits(texts, limits)
    if req.alignment and not torch_model(m):
        raise ApiError(400, f"model {m.name!r}: alignment needs the torch engine")


def checked_constraints(
    req: TranslateRequest, sentences: list[str], m: ServedModel
) -> tuple[tuple[str, ...], ...] | None:
    """One tuple of phrases per sentence (None: no constraints), checked before the request is
    queued: the torch engine (400; with a shortlist, these sentences search the full vocabulary),
    one list per sentence and phrases the model can spell (422)."""
    if req.constraints is None:
        return None
    constraints = [req.constraints] if isinstance(req.text, str) else req.constraints
    translator = m.batcher.translator
    if getattr(translator, "engine", None) != "torch":
        raise ApiError(400, f"model {m.name!r}: constraints need the torch engine")
    if len(constraints) != len(sentences) or not all(
        isinstance(c, list) and all(isinstance(p, str) for p in c) for c in constraints
    ):
        raise ApiError(
            422,
            "constraints: a list of phrases for one text, one list of phrases per sentence "
            "for a list of texts",
        )
    for i, phrases in enumerate(constraints):
        for j, phrase in enumerate(phrases):
            check_unicode(phrase, f"constraints: sentence {i + 1}, phrase {j + 1}")
    try:
        translator.constraint_ids(translator.encode(sentences)[0], constraints)
    except TranslateError as e:
        raise ApiError(422, f"constraints: {e}")
    return tuple(tuple(c) for c in constraints)


def check_attention(req: AttentionRequest, m: ServedModel, limits: Limits) -> None:
    """An /attention request's size (413), text (422) and engine (400)."""
    if len(req.text) > limits.max_chars:
        raise ApiError(413, f"{len(req.text)} characters: at most {limits.max_chars} per request")
    check_text([req.text])
    if not torch_model(m):
        raise ApiError(400, f"model {m.name!r}: attention needs the torch engine")


def check_work(measured: Measured, beam: int, *, max_request_work: int) -> int:
    """The request's source tokens (pieces + EOS), or 413 when they times ``beam`` are over
    ``max_request_work``."""
    tokens = sum(measured.tokens)
    if tokens * beam > max_request_work:
        raise ApiError(
            413,
            f"{tokens:,} source pieces x beam {beam} = {tokens * beam:,}: at most "
            f"{max_request_work:,} per request (--max-request-work)",
        )
    return tokens


def check_attention_cells(m: ServedModel, tokens: int, *, max_cells: int) -> None:
    """413 when the attention maps of a source of ``tokens`` pieces could hold more than
    ``max_cells`` numbers: layers x heads x target x source, the output being at most |x| + 50
    pieces (+ <s>)."""
    model = m.batcher.translator.model
    layers, heads = len(model.decoder.layers), model.cfg.n_heads
    cells = layers * heads * tokens * (tokens + 51)
    if cells > max_cells:
        raise ApiError(
            413,
            f"{tokens:,} source pieces: the attention maps could hold {cells:,} numbers, at most "
            f"{max_cells:,} (--max-attention-cells); send a shorter sentence",
        )
