"""The JSON bodies of the HTTP API as pydantic models: the requests (validated strictly: unknown
fields and wrong types are a 422) and the answers (for the OpenAPI page at /docs and for
tests/test_serve_fuzz.py, which checks every answer against them)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


# -------------------------------------------------------------------------------------- requests
class TranslateRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    model: str | None = Field(None, description="model name (default: the first one served)")
    text: str | list[str] = Field(description="one text or a list of texts (paragraphs, markup)")
    target_lang: str | None = Field(
        None,
        description="the target language of a model trained for several (nmt prepare --tgt de,fr,cs): "
        "each sentence is given its tag >>LANG<< (nmt.data.multilingual); needed by such a model",
    )
    beam: int = Field(4, ge=1, le=32, description="beam size (paper: 4; 1 = greedy)")
    alpha: float | None = Field(None, description="length penalty (default 0.6; 0 for beam 1)")
    nbest: int = Field(
        1,
        ge=1,
        description="translations per text (<= beam): the text with each sentence's i-th hypothesis",
    )
    alignment: bool = Field(False, description="source-target piece alignment (last layer, heads averaged)")
    mbr: bool = Field(
        False,
        description="minimum-Bayes-risk choice among the beam's n-best (sentence chrF, "
        "T 0.5; nmt.infer.mbr) instead of the top one; beam >= 2, nbest 1",
    )
    constraints: list[str] | list[list[str]] | None = Field(
        None,
        description="terminology: target phrases each translation must contain, in any order (hard lexical "
        "constraints, nmt.infer.constraints): a list of phrases for one text, a list of them per "
        "sentence for a list; torch engine",
    )
    glossary: list[list[str]] | dict[str, str] | None = Field(
        None,
        description="terminology: [source term, target term] pairs (or {source: target}): where a "
        "sentence holds a source term, its translation holds the target term; with the server's "
        "--glossary; torch engine",
    )
    format: Literal["text", "html", "xml"] = Field(
        "text",
        description="html / xml: tags taken out, the text translated, the tags put back around the aligned "
        "words (nmt.realtext.markup); not with alignment or constraints",
    )
    split: bool = Field(
        True,
        description="split each text into sentences, join their translations (false: a text is one sentence)",
    )
    recase: bool = Field(
        True, description="ALL-CAPS / Title-Case sentences translated in normal case, then recased"
    )
    max_words: int | None = Field(
        None,
        ge=0,
        description="sentences of more words cut at clauses, with a warning (0: never; null: the "
        "model's: the longest sentence it learned from)",
    )
    part_words: int | None = Field(
        None,
        ge=1,
        description="a cut sentence's parts have at most this many words (null: the 99th percentile of "
        "the model's training sources' words, at most max_words)",
    )
    protect: bool = Field(
        True,
        description="numbers, dates, times, URLs, e-mail addresses, emoji, placeholders and `code` the "
        "model lost put back as written (nmt.realtext.protect); the answer's restored lists them",
    )
    guards: bool = Field(
        True,
        description="each sentence checked for loops, odd lengths, copies, omissions and low confidence, "
        "a flagged one searched once more; what still fires is in the answer's flags",
    )
    confidence: bool = Field(
        True, description="the answer's confidence (0..1) per text and per word (nmt.infer.confidence)"
    )


class AttentionRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    model: str | None = None
    text: str
    beam: int = Field(4, ge=1, le=32)
    alpha: float | None = None


def request_body(schema: type[BaseModel]) -> dict:
    """OpenAPI ``openapi_extra`` of a route that reads ``schema`` from its JSON body itself (so
    that a bad body is the API's own 400/415/422, not FastAPI's)."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema.model_json_schema()}},
        }
    }


# ------------------------------------------------------------------------------------- responses
class ErrorDetail(BaseModel):
    status: int
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


class Hypothesis(BaseModel):
    text: str
    score: float
    alignment: list[list[int]] | None = Field(
        None, description="[source piece, output piece] pairs (when asked)"
    )


class WordConfidence(BaseModel):
    word: str
    confidence: float
    start: int | None = Field(None, description="its first character in text (null: not found there)")
    end: int | None = None


class SentenceTranslation(BaseModel):
    text: str
    score: float
    nbest: list[Hypothesis]
    alignment: list[list[int]] | None = Field(
        None, description="[source piece, output piece] pairs (when asked)"
    )
    confidence: float | None = Field(
        None, description="0..1; calibrated: the chrF such translations had on the validation set / 100"
    )
    flags: list[str] = Field(
        default_factory=list,
        description="the guards that fired: repetition, length, copy, omission, low-confidence",
    )
    restored: list[str] = Field(default_factory=list, description="protected spans the model lost, put back")
    words: list[WordConfidence] = Field(default_factory=list, description="each output word's confidence")


class TranslateResponse(BaseModel):
    model: str
    translations: list[SentenceTranslation]
    warnings: list[str] | None = Field(None, description="sentences cut to the model's positions (when any)")


class AttentionResponse(BaseModel):
    model: str
    text: str
    score: float
    source_pieces: list[str]
    target_pieces: list[str]
    cross: list[list[list[list[float]]]] = Field(description="[layer][head][target t][source s]")
    warnings: list[str] | None = None


class HealthResponse(BaseModel):
    status: str
    models: list[str]
    auth: bool


class ModelsResponse(BaseModel):
    models: list[dict[str, Any]]


def documented(*statuses: int) -> dict:
    """OpenAPI ``responses`` for these error statuses (all with the JSON error body)."""
    return {s: {"model": ErrorBody} for s in statuses}


POST_ERRORS = documented(400, 401, 404, 413, 415, 422, 500, 503, 504)
