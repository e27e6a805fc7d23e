"""Text in, text out: what every engine's translator shares.

``TextTranslator`` holds a model and its SentencePiece models (``sp`` for sources; ``tgt_sp`` for target
text, the checkpoint's target_spm.model where it has one, else ``sp``: nmt.vocab) and turns sentences
into token ids and back: sentences are cleaned as at training time (strip, NFC), encoded, given EOS
and truncated to the model's positions (with a warning naming the sentence, counted from 1); an empty
sentence gives an empty output without calling the model. Its engines add ``translate_nbest`` (the search):
nmt.infer.translate.Translator (torch) and nmt.infer.engine_ctranslate2.CTranslate2Translator.
``translate`` runs real text through nmt.realtext.pipeline, as `nmt translate` does;
``translate_sentences`` keeps each sentence's best output as the model gives it, or the MBR /
reranked choice among its n-best.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Callable

from ..data.lines import clean_line
from ..realtext.job import TextOptions
from ..realtext.pipeline import TextTranslation, TranslationRequest, translate_request
from ..realtext.quality import QualityOptions
from ..vocab import EOS
from .mbr import MBR, mbr_results
from .options import SearchOptions, with_fields
from .rerank import Rerank, rerank_results
from .results import TranslateError, Translation, check_strings
from .search import reading_order


def add_eos(pieces: list[int], max_positions: int, *, eos: bool = True) -> tuple[list[int], bool]:
    """pieces + [EOS], cut to ``max_positions`` tokens; returns (tokens, was_truncated). ``eos``
    false (ModelConfig.source_eos, a model trained without it): the pieces alone, cut alike."""
    cut = len(pieces) > max_positions - 1
    return list(pieces[: max_positions - 1]) + ([EOS] if eos else []), cut


def truncation_message(index: int, n_pieces: int, limit: int) -> str:
    """The warning for a sentence cut to the model's positions (API and CLI; counted from 1)."""
    return f"line {index + 1}: {n_pieces} pieces, truncated to {limit - 1} (model.max_positions={limit})"


def check_sentences(sentences) -> None:
    """TypeError unless ``sentences`` is a list/tuple of str (naming the first bad item, from 1)."""
    check_strings(sentences, item="sentence", expected="sentences: expected a str or a list of str")


def one_or_many(method):
    """Let a Translator method that takes a list of sentences take one str as well (it then
    returns that sentence's result); a list must hold only str (TypeError naming the item)."""

    @functools.wraps(method)
    def wrapper(self, sentences, *args, **kwargs):
        if isinstance(sentences, str):
            return method(self, [sentences], *args, **kwargs)[0]
        check_sentences(sentences)
        return method(self, sentences, *args, **kwargs)

    return wrapper


def training_data(checkpoint) -> dict | None:
    """What a checkpoint records of its training data (config.json's "data": nmt prepare's
    meta.json): of a checkpoint or run directory (checkpoint.resolve_checkpoint's), or of a
    CTranslate2 export through the checkpoint it was exported from (nmt_export.json's "source");
    None where none is found."""
    from pathlib import Path

    from .. import checkpoint as ckpt

    folder = Path(checkpoint)
    try:
        if (folder / "nmt_export.json").is_file():
            folder = Path(ckpt.read_json(folder / "nmt_export.json")["source"])
        data = ckpt.read_json(ckpt.resolve_checkpoint(folder) / "config.json").get("data")
    except (ckpt.CheckpointError, KeyError, TypeError):
        return None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True)
class SourceWords:
    """The lengths in words of the sentences a model learned from (`nmt prepare` records them):
    ``longest`` and ``p99``, the 99th percentile; both 0 for a source without spaces between words,
    whose sentences are not counted in words."""

    longest: int
    p99: int


def source_words(data: dict | None) -> SourceWords | None:
    """The SourceWords of a checkpoint's training data record; None where the data predates it."""
    train = ((data or {}).get("splits") or {}).get("train") or {}
    if "src_words" not in train:
        return None
    words = train["src_words"]
    if not isinstance(words, dict):  # recorded as none: a source without spaces between words
        return SourceWords(0, 0)
    return SourceWords(int(words["longest"]), int(words["p99"]))


def pieces(sp) -> list[str]:
    """The vocabulary of a SentencePiece model: its pieces in id order."""
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


class TextTranslator:
    """A model (``model.cfg.max_positions``) with its SentencePiece models, ``sp`` (sources) and
    ``tgt_sp`` (target text: outputs, prefixes, constraints; ``sp`` itself where the checkpoint has
    one model for both sides): sentences to ids and back; an engine subclass searches
    (``translate_nbest``) and names itself in ``engine``."""

    engine: str
    sp: object  # sentencepiece.SentencePieceProcessor
    tgt_sp: object
    # the lengths in words of the training sources (source_words of the checkpoint's training data;
    # None: not recorded): real-text translation cuts a longer sentence by default
    source_words: SourceWords | None = None
    # what the checkpoint records of its training data (training_data; None: nothing): its languages
    data: dict | None = None

    def encode(self, sentences: list[str]) -> tuple[list[list[int]], list[tuple[int, int]]]:
        """Token ids (+EOS; [] for an empty sentence) and (index, n_pieces) of truncated ones."""
        cleaned = [clean_line(s) for s in sentences]
        encoded = self.sp.encode(cleaned) if cleaned else []
        sources, truncated = [], []
        for i, (text, ids) in enumerate(zip(cleaned, encoded)):
            if not text:
                sources.append([])
                continue
            eos = getattr(self.model.cfg, "source_eos", True)  # a stand-in model's cfg may lack it
            tokens, cut = add_eos(ids, self.model.cfg.max_positions, eos=eos)
            sources.append(tokens)
            if cut:
                truncated.append((i, len(ids)))
        return sources, truncated

    def decode(self, tokens: list[int]) -> str:
        """Detokenized text on one line (any line break the pieces might carry becomes a space)."""
        text = self.tgt_sp.decode(reading_order(self.model, tokens)) if tokens else ""
        return text.replace("\r", " ").replace("\n", " ")

    def report_truncated(
        self, truncated: list[tuple[int, int]], on_truncate: Callable[[int, int], None] | None
    ) -> None:
        """``on_truncate(index, n_pieces)`` for each sentence ``encode`` cut (default: a warning)."""
        for i, n in truncated:
            if on_truncate is not None:
                on_truncate(i, n)
            else:
                warnings.warn(truncation_message(i, n, self.model.cfg.max_positions))

    def translate(
        self,
        texts: list[str] | str,
        options: SearchOptions | None = None,
        *,
        text: TextOptions | None = None,
        target_lang: str | None = None,
        batch_tokens: int = 2048,
        mbr: MBR | None = None,
        rerank: Rerank | None = None,
        quality: QualityOptions | None = None,
        **fields,
    ) -> list[str] | str:
        """Each text translated as `nmt translate` translates a line (nmt.realtext.pipeline: sentences
        split, capitals recased, long sentences cut, ``text.format`` "html" / "xml": tags placed);
        one str in, one str out. ``options``: how to search (SearchOptions; its fields also as
        keywords, ``beam=4``); ``text``: how real text is handled (nmt.realtext.job.TextOptions);
        ``target_lang``: the target of a model of several (checked against its checkpoint);
        ``mbr`` / ``rerank``: the choice among the beam's n-best; ``quality``: the guards (on by
        default: a flagged sentence searched once more; nmt.realtext.quality). ``translate_sentences``: the
        model's output per sentence (and its prefixes and constraints); ``translate_request``: the
        whole TextTranslation (scores, n-best, cuts) of any TranslationRequest."""
        one = isinstance(texts, str)
        request = TranslationRequest(
            [texts] if one else texts,
            text=text or TextOptions(),
            search=with_fields(options, fields),
            target_lang=target_lang,
            mbr=mbr,
            rerank=rerank,
            quality=quality or QualityOptions(confidence=False),
        )
        out = [t.text for t in self.translate_request(request, batch_tokens=batch_tokens)]
        return out[0] if one else out

    def translate_request(
        self,
        request: TranslationRequest,
        *,
        batch_tokens: int = 2048,
        on_truncate: Callable[[int, int], None] | None = None,
        on_batch: Callable[[int], None] | None = None,
    ) -> list[TextTranslation]:
        """A TranslationRequest through nmt.realtext.pipeline (``on_truncate(text, pieces)``, from 0;
        default: a warning)."""

        def warn(i: int, n: int) -> None:
            warnings.warn(truncation_message(i, n, self.model.cfg.max_positions))

        return translate_request(
            self, request, batch_tokens=batch_tokens, on_truncate=on_truncate or warn, on_batch=on_batch
        )

    @one_or_many
    def translate_sentences(
        self,
        sentences: list[str] | str,
        options: SearchOptions | None = None,
        *,
        batch_tokens: int = 2048,
        prefix: list[str] | None = None,
        mbr: MBR | None = None,
        rerank: Rerank | None = None,
        constraints: list[list[str]] | None = None,
        **fields,
    ) -> list[str]:
        """Sentence level: the best translation of each sentence as the model gives it (no
        splitting, recasing or cutting; ``translate`` handles real text); one str in, one str out.
        ``options``: how to
        search (nmt.infer.options.SearchOptions; its fields may also be given as keywords,
        ``beam=4, alpha=0.6``; alpha None: beam 1 is greedy search; stopping None: the engine's own
        rule, "exact" for torch, "fast" for CTranslate2). ``mbr``: the minimum-Bayes-risk choice
        among the beam's ``beam``-best instead of the top one; ``rerank``: the best of the beam's
        ``beam``-best rescored with a second (right-to-left) model (nmt.infer.rerank).
        ``constraints[i]``: phrases translation i must contain (see translate_nbest; the torch
        engine only)."""
        options = with_fields(options, fields)
        if constraints is not None and self.engine != "torch":
            raise TranslateError("constraints: the torch engine's beam search only (not CTranslate2)")
        if (mbr is not None or rerank is not None) and options.sampling is not None:
            raise TranslateError("mbr and rerank choose among the beam's n-best: not with sampling")
        if mbr is not None and rerank is not None:
            raise TranslateError("choose one of mbr and rerank")
        results = self.translate_nbest(
            sentences,
            options.replace(nbest=1 if mbr is None and rerank is None else options.beam),
            batch_tokens=batch_tokens,
            prefix=prefix,
            **({} if constraints is None else {"constraints": constraints}),
        )
        if mbr is not None:
            results = mbr_results(results, mbr)
        elif rerank is not None:
            results = self.rerank(
                sentences, results, rerank, alpha=options.penalty, batch_tokens=batch_tokens
            )
        return [t[0].text for t in results]

    def rerank(
        self,
        sentences: list[str],
        results: list[list[Translation]],
        rerank: Rerank,
        *,
        alpha: float,
        batch_tokens: int = 2048,
    ) -> list[list[Translation]]:
        """``results`` (this translator's n-best of ``sentences``) reordered by the combined score
        of nmt.infer.rerank; TranslateError when the rescoring model's vocabulary differs."""
        if self.engine != "torch" or rerank.translator.engine != "torch":
            raise TranslateError(
                "rerank: the torch engine's n-best, rescored by torch models (not CTranslate2)"
            )
        if pieces(rerank.translator.sp) != pieces(self.sp):
            raise TranslateError(
                "rerank: the rescoring model's vocabulary differs from the searching model's "
                "(they must share one SentencePiece model, id for id)"
            )
        sources, _ = self.encode(sentences)
        return rerank_results(results, sources, self, rerank, alpha=alpha, batch_tokens=batch_tokens)
