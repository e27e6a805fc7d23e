"""The CTranslate2 engine: ``Translator.load(path, engine="ctranslate2")`` and
``nmt translate --engine ctranslate2``.

``path`` is a directory written by ``nmt export ctranslate2``, or an nmt checkpoint / run directory,
which is then exported once (float32) into a cache directory keyed by the checkpoint's manifest
(``$NMT_CACHE_DIR`` or ``~/.cache/nmt``, then ``ctranslate2/<sha256>``). Weights are quantized when
loaded if ``compute_type`` asks for it (``int8``: CTranslate2's int8 GEMMs).

The input/output contract is the torch engine's (``Translator``): cleaning, SentencePiece, EOS,
truncation to the model's positions with a warning, empty lines give empty outputs without calling
the model, results in input order. Differences: CTranslate2's own beam search (its early stopping
differs from nmt.search's, and it ranks hypotheses by log-probability over |Y| ** alpha where the
paper's penalty is ((5 + |Y|) / 6) ** alpha; the scores it returns are converted to the paper's), the
max length a*|x|+b is applied per batch and outputs are then cut to each sentence's own limit.

With a vocabulary shortlist (``shortlist=FILE``, nmt.infer.shortlist) the search uses CTranslate2's
vocabulary map (``use_vmap=True``): an export directory must hold the shortlist's ``vmap.txt``
(``nmt shortlist DATA --out FILE --ctranslate2 DIR`` writes it); a checkpoint is exported once per
shortlist into the cache, with its map.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..config import ModelConfig, from_dict
from ..data.batching import make_batches
from ..export.ctranslate2 import ExportError, export_ctranslate2, import_ctranslate2
from ..vocab import EOS, UNK, load_spm
from .confidence import calibration_of
from .options import SearchOptions, with_fields
from .results import TranslateError, Translation
from .search import length_penalty
from .text import TextTranslator, one_or_many, source_words, training_data

COMPUTE_TYPES = {"auto": "default", "fp32": "float32", "bf16": "bfloat16", "int8": "int8"}


def without_eos(source: list[int]) -> list[int]:
    """A source's pieces without the EOS nmt appends (CTranslate2 appends its own)."""
    return source[:-1] if source and source[-1] == EOS else source


def nmt_score(score: float, length: int, alpha: float) -> float:
    """CTranslate2's score of an output of ``length`` tokens (EOS included), its log-probability over
    length ** alpha, as nmt scores it: over the paper's ((5 + length) / 6) ** alpha
    (nmt.infer.search.length_penalty)."""
    return float(score) * length**alpha / length_penalty(length, alpha) if alpha else float(score)


@dataclass
class CTranslate2Model:
    """What the engine needs of a model: its configuration and a ``ctranslate2.Translator``."""

    cfg: ModelConfig
    translator: Any  # ctranslate2.Translator
    directory: Path


def cache_dir() -> Path:
    return Path(os.environ.get("NMT_CACHE_DIR") or Path.home() / ".cache" / "nmt") / "ctranslate2"


def load_checkpoint_spm(directory: Path, *, side: str = "source", source=None):
    """The SentencePiece model of a checkpoint or CTranslate2 export ``directory`` (``side``: the
    source's or the target's, nmt.vocab.load_spm); CheckpointError naming the spm.model (or
    target_spm.model) when it is missing or unreadable (as nmt.infer.translate.load_models)."""
    from ..checkpoint import CheckpointError

    try:
        return load_spm(directory, side=side, source=source)
    except ValueError as e:
        raise CheckpointError(str(e)) from None


def exported_dir(path: str | Path, shortlist=None) -> Path:
    """``path`` if it is a CTranslate2 export, else the cached export of the nmt checkpoint there
    (one per ``shortlist``, an nmt.infer.shortlist.Shortlist, with its vocabulary map)."""
    from .shortlist import ShortlistError, check_model, dumps, vmap_text

    path = Path(path)
    if (path / "model.bin").exists():
        if not (path / "nmt_export.json").exists():
            raise ExportError(
                f"{path}: a CTranslate2 model not exported by `nmt export ctranslate2` (no nmt_export.json)"
            )
        if shortlist is not None:  # its vmap.txt must be this shortlist's
            vocab = json.loads((path / "shared_vocabulary.json").read_text(encoding="utf-8"))
            vmap = path / "vmap.txt"
            try:
                same = vmap.is_file() and vmap.read_text(encoding="utf-8") == vmap_text(shortlist, vocab)
            except ShortlistError as e:
                raise ExportError(f"{path}: {e}") from None
            if not same:
                raise ExportError(
                    f"{vmap}: {'not' if vmap.is_file() else 'missing, so not'} the vocabulary map of "
                    f"the shortlist given: write it with `nmt shortlist DATA --out FILE "
                    f"--ctranslate2 {path}`"
                )
        return path
    from ..checkpoint import MANIFEST, resolve_checkpoint

    source = resolve_checkpoint(path)
    digest = hashlib.sha256((source / MANIFEST).read_bytes())
    if shortlist is not None:
        sp = load_checkpoint_spm(source)
        try:
            check_model(
                shortlist,
                source="shortlist",
                model=str(source),
                vocab_size=sp.get_piece_size(),
                spm_sha256=hashlib.sha256((source / "spm.model").read_bytes()).hexdigest(),
            )
        except ShortlistError as e:
            raise ExportError(str(e)) from None
        digest.update(dumps(shortlist).encode("utf-8"))
    out = cache_dir() / digest.hexdigest()[:32]
    if not (out / "nmt_export.json").exists():  # atomic: a concurrent or interrupted export leaves no half
        export_ctranslate2(source, out, shortlist=shortlist, own_shortlist=False)
    return out


def load_ctranslate2(
    path: str | Path,
    *,
    device: str | None = None,
    compute_type: str = "default",
    threads: int | None = None,
    shortlist=None,
) -> CTranslate2Model:
    ctranslate2 = import_ctranslate2()
    import torch

    directory = exported_dir(path, shortlist)
    meta = json.loads((directory / "nmt_export.json").read_text())
    cfg = from_dict(ModelConfig, meta["model"], section="model")
    translator = ctranslate2.Translator(
        str(directory),
        device=device or "cpu",
        compute_type=compute_type,
        intra_threads=threads or torch.get_num_threads(),
        inter_threads=1,
    )
    return CTranslate2Model(cfg, translator, directory)


class CTranslate2Translator(TextTranslator):
    """A translator with the torch engine's encode/decode and contract (nmt.infer.text) whose
    search runs in CTranslate2."""

    engine = "ctranslate2"

    def __init__(self, model: CTranslate2Model, sp, *, device: str = "cpu", shortlist=None, tgt_sp=None):
        """``sp``: the SentencePiece model of the sources; ``tgt_sp``: that of the outputs (None: ``sp``)."""
        self.model, self.sp, self.device, self.dtype = model, sp, device, None
        self.tgt_sp = sp if tgt_sp is None else tgt_sp
        self.shortlist = shortlist  # searched with the model directory's vmap.txt (see exported_dir)
        self.vocab = json.loads((model.directory / "shared_vocabulary.json").read_text(encoding="utf-8"))
        self.piece_ids = {p: i for i, p in enumerate(self.vocab)}

    @classmethod
    def load(
        cls, checkpoint: str | Path, *, device: str | None = None, precision: str = "auto", shortlist=None
    ) -> "CTranslate2Translator":
        """precision: fp32, bf16, int8 (CTranslate2 quantizes when loading), or auto (as exported).
        ``shortlist``: a file of `nmt shortlist` (or a Shortlist), searched as the vocabulary map."""
        from .shortlist import Shortlist, ShortlistError
        from .shortlist import load as load_shortlist

        if precision not in COMPUTE_TYPES:
            raise ExportError(
                f"precision {precision!r}: the ctranslate2 engine takes {', '.join(COMPUTE_TYPES)}"
            )
        if shortlist is not None and not isinstance(shortlist, Shortlist):
            try:
                shortlist = load_shortlist(shortlist)
            except ShortlistError as e:
                raise ExportError(str(e)) from None
        model = load_ctranslate2(
            checkpoint, device=device, compute_type=COMPUTE_TYPES[precision], shortlist=shortlist
        )
        sp = load_checkpoint_spm(model.directory)
        tgt_sp = load_checkpoint_spm(model.directory, side="target", source=sp)
        translator = cls(model, sp, device=device or "cpu", shortlist=shortlist, tgt_sp=tgt_sp)
        translator.data = training_data(checkpoint)
        translator.calibration = calibration_of(checkpoint)
        translator.source_words = source_words(translator.data)
        return translator

    def use_shortlist(self, shortlist) -> None:
        raise TranslateError(
            "the ctranslate2 engine reads its vocabulary map when it loads the model: "
            "Translator.load(..., engine='ctranslate2', shortlist=FILE)"
        )

    @one_or_many
    def translate_nbest(
        self,
        sentences: list[str] | str,
        options: SearchOptions | None = None,
        *,
        batch_tokens: int = 2048,
        on_truncate: Callable[[int, int], None] | None = None,
        on_batch: Callable[[int], None] | None = None,
        prefix: list[str] | None = None,
        **fields,
    ) -> list[list[Translation]]:
        """As the torch engine's (nmt.infer.translate.Translator.translate_nbest), searched by
        CTranslate2 with its own stopping rule ("fast"): TranslateError for prefixes, sampling, the
        exact stopping rule and the n-gram block, which are the torch engine's."""
        options = with_fields(options, fields)
        if (
            prefix is not None
            or options.sampling is not None
            or options.stopping_rule("fast") != "fast"
            or options.no_repeat_ngram
        ):
            raise TranslateError(
                "prefix-constrained decoding, sampling, the exact stopping rule and --no-repeat-ngram "
                "are the torch engine's (--engine torch); CTranslate2 stops as --stopping fast"
            )
        sources, truncated = self.encode(sentences)
        self.report_truncated(truncated, on_truncate)
        hyps = self.search_ids(
            sources,
            options,
            batch_tokens=batch_tokens,
            on_batch=on_batch,
            use_vmap=self.shortlist is not None,
        )
        return [[Translation(self.decode(ids), score, ids) for ids, score in hs] for hs in hyps]

    def forced_scores(self, sources: list[list[int]], outputs: list[list[int]], *, coverage: bool = False):
        """Each output's pieces' log-probabilities and EOS's (CTranslate2's score_batch); no
        coverage (its attention is not given)."""
        from .confidence import FLOOR, ForcedScores

        results = [ForcedScores([]) for _ in sources]
        todo = [i for i, s in enumerate(sources) if s]
        if todo:
            scored = self.model.translator.score_batch(
                [[self.vocab[t] for t in without_eos(sources[i])] for i in todo],
                [[self.vocab[t] for t in outputs[i]] for i in todo],
            )
            for i, r in zip(todo, scored):
                results[i] = ForcedScores([max(float(x), FLOOR) for x in r.log_probs])
        return results

    def search_ids(
        self,
        sources: list[list[int]],
        options: SearchOptions = SearchOptions(),
        *,
        batch_tokens: int = 2048,
        max_sentences: int | None = None,
        on_batch: Callable[[int], None] | None = None,
        use_vmap: bool = False,
    ) -> list[list[tuple[list[int], float]]]:
        """Search token-id sources (ending with EOS; [] gives one empty output) in the torch engine's
        length-sorted batches, with ``options`` (beam, alpha resolved as the torch engine does,
        nbest, length limits, min_len): per source, up to ``nbest`` (ids without BOS/EOS, score).
        ``use_vmap``: restrict each batch's target vocabulary with the model's vmap.txt."""
        alpha = options.penalty
        limit = self.model.cfg.max_positions
        results: list[list[tuple[list[int], float]]] = [[([], 0.0)] for _ in sources]
        todo = [i for i, s in enumerate(sources) if s]
        for batch in make_batches(
            [len(sources[i]) for i in todo], batch_tokens=batch_tokens, max_sentences=max_sentences
        ):
            rows = [sources[todo[j]] for j in batch]
            # |Y| (with EOS) <= a*|x| + b, |x| counting EOS; CTranslate2 appends the EOS itself
            max_len = [options.max_len(len(r), limit) for r in rows]
            out = self.model.translator.translate_batch(
                [[self.vocab[t] for t in without_eos(r)] for r in rows],
                beam_size=options.beam,
                length_penalty=alpha,
                num_hypotheses=options.nbest,
                return_scores=True,
                max_decoding_length=max(max_len),
                min_decoding_length=max(0, options.min_len - 1),
                max_input_length=0,
                use_vmap=use_vmap,
            )
            for j, n, row, res in zip(batch, max_len, rows, out):
                results[todo[j]] = self.within_limit(row, n, res, alpha=alpha, batch_limit=max(max_len))
            if on_batch is not None:
                on_batch(len(batch))
        return results

    def within_limit(
        self, source: list[int], limit: int, result, *, alpha: float, batch_limit: int
    ) -> list[tuple[list[int], float]]:
        """The hypotheses of one sentence of a batch that CTranslate2 decoded up to the batch's
        largest ``batch_limit`` tokens, held to the sentence's own ``limit`` |Y| (EOS included) as
        the torch engine holds it: an output that ended (EOS) within its limit keeps CTranslate2's
        score; one that reached its limit is cut to limit - 1 pieces and ended with EOS (the token
        the torch engine forces at the last allowed step), and that output is rescored by the model
        (score_batch: log p(pieces, EOS | x)), so that every score is that of the tokens returned.
        Best first."""
        kept, cut = [], []
        for pieces, score in zip(result.hypotheses, result.scores):
            ids = [self.piece_ids.get(p, UNK) for p in pieces]
            ended = len(pieces) < batch_limit  # CTranslate2 stopped on EOS (not included in pieces)
            if ended and len(pieces) + 1 <= limit:
                kept.append((ids, nmt_score(score, len(pieces) + 1, alpha)))
            else:
                cut.append(ids[: limit - 1])
        if cut:
            source_pieces = [self.vocab[t] for t in source[:-1]]
            scored = self.model.translator.score_batch(
                [source_pieces] * len(cut), [[self.vocab[t] for t in ids] for ids in cut], max_input_length=0
            )
            for ids, res in zip(cut, scored):  # res.log_probs: one per target token, EOS included
                kept.append((ids, sum(res.log_probs) / length_penalty(len(ids) + 1, alpha)))
        return sorted(kept, key=lambda h: -h[1])
