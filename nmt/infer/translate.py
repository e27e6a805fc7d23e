"""Translation with the torch engine: batching by tokens, the Python API (`Translator`).

    from nmt import Translator
    t = Translator.load("runs/wmt14/checkpoints/best")
    t.translate(["Hello world."], beam=4)                 # -> ["Hallo Welt."]
    t.translate(["Hello world."], SearchOptions(beam=4))  # the same: the options as one value
    t.translate_nbest(["Hello world."], beam=4, nbest=2)  # -> [[Translation(text, score, tokens), ...]]
    t.translate(["Hello world."], beam=8, mbr=MBR())       # MBR among the beam's 8-best (nmt.infer.mbr)
    t.translate(["Hello world."], constraints=[["Welt"]])  # holding the phrases (nmt.infer.constraints)

Sentences are cleaned and encoded as nmt.infer.text describes (EOS added, too-long ones
truncated with a warning, empty ones translate to an empty string without calling the model),
sorted by length into batches of at most ``batch_tokens`` padded source tokens, searched
(nmt.infer.search), and returned in input order. ``translate`` also takes one str and returns one
str; anything but str in the list is a TypeError naming its position. ``Translator.load`` picks
the engine: this module's (torch) or CTranslate2's (nmt.infer.engine_ctranslate2). The command
line (`nmt translate`) is in nmt.infer.command.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from ..atomic import write_text
from ..data.batching import make_batches  # the one length batcher (training uses its pack)
from ..data.download import DataError
from ..data.lines import clean_line, read_lines
from ..precision import autocast, resolve_precision
from ..vocab import PAD, SPM, TARGET_SPM, check_special_ids, load_spm
from .confidence import ForcedScores, calibration_of, forced_scores
from .constraints import encode_constraints
from .engine_ctranslate2 import CTranslate2Translator
from .options import Sampling, SearchOptions, with_fields  # noqa: F401  (Sampling: re-exported)
from .packed import pack_linears
from .quantize import quantize_int8
from .results import ConstraintsError, TranslateError, Translation, check_strings
from .search import (
    Ensemble,
    Hypothesis,
    beam_search,
    default_alpha,  # noqa: F401  (re-exported)
    output_lengths,
    right_to_left,
    sample,
    sentence_rng,
)
from .text import TextTranslator, add_eos, one_or_many, pieces, source_words, training_data

ENGINES = ("torch", "ctranslate2")


def checkpoint_shortlist(checkpoint) -> Path | None:
    """The shortlist ``Translator.load`` searches with by default: one checkpoint's own (an
    ensemble's members may each carry one; none is chosen for them)."""
    from .shortlist import of_checkpoint

    paths = list(checkpoint) if isinstance(checkpoint, (list, tuple)) else [checkpoint]
    return of_checkpoint(paths[0]) if len(paths) == 1 else None


# ----------------------------------------------------------------------------- ids in, ids out
@dataclass(frozen=True)
class SentenceInputs:
    """What belongs to each source sentence, one item per source (None: nothing for any):
    ``prefix[i]``: target ids output i must start with; ``constraints[i]``: target phrases (ids)
    output i must contain (nmt.infer.constraints; search only, not with a shortlist);
    ``union_groups[i]``: with a shortlist, source i is searched over the union of its group, whatever
    batch it is in (else over its batch's union)."""

    prefix: list[list[int]] | None = None
    constraints: list[list[list[int]]] | None = None
    union_groups: list | None = None

    def check(self, n_sources: int) -> None:
        """ValueError naming the first list that does not hold one item per source."""
        for name in ("prefix", "constraints", "union_groups"):
            items = getattr(self, name)
            if items is not None and len(items) != n_sources:
                raise ValueError(f"{name}: {len(items)} lists for {n_sources} sources")


@dataclass(frozen=True)
class BatchedSearch:
    """Search sources (token ids ending with EOS) in length-sorted batches: beam (or greedy) search
    with ``options``, or sampling (``options.sampling``), over the full vocabulary or a
    ``shortlist``'s union per batch (an nmt.infer.shortlist.Shortlist), on ``device`` with autocast
    to ``dtype``; ``allowed_tokens``: beam_search's token mask (search only). Made once, then
    ``sources`` is called with the data."""

    options: SearchOptions = SearchOptions()
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    dtype: torch.dtype | None = None
    allowed_tokens: object = None
    shortlist: object = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "device", torch.device(self.device))  # "cpu" -> torch.device("cpu")

    def check(self, n_sources: int, inputs: SentenceInputs) -> None:
        """ValueError for options that do not go together, or ``inputs`` that do not hold one item
        per source; checked before any input is read, so that a batch of empty lines is refused
        alike."""
        inputs.check(n_sources)
        sampling = self.options.sampling
        if self.allowed_tokens is not None and sampling is not None:
            raise ValueError("allowed_tokens: only for beam/greedy search, not sampling")
        if self.allowed_tokens is not None and self.shortlist is not None:
            raise ValueError(
                "allowed_tokens: masks the full vocabulary, not a shortlist's (use one or the other)"
            )
        if inputs.constraints is not None and (sampling is not None or self.shortlist is not None):
            raise ValueError(
                "constraints: only for beam/greedy search over the full vocabulary, "
                "not sampling or a shortlist"
            )

    def sources(
        self,
        model,
        sources: list[list[int]],
        inputs: SentenceInputs = SentenceInputs(),
        *,
        batch_tokens: int = 2048,
        max_sentences: int | None = None,
        on_batch: Callable[[int], None] | None = None,
    ) -> list[list[Hypothesis]]:
        """Every source's hypotheses (an empty source: one empty hypothesis with score 0), searched
        in batches of at most ``batch_tokens`` padded source tokens (and ``max_sentences``), in input
        order; ``on_batch(n)`` after each. ValueError (``check``) before anything is searched."""
        self.check(len(sources), inputs)
        prefix, constraints = inputs.prefix, inputs.constraints
        keeps = None  # the scope "batch" with union_groups: each source's group's ids, (W,) each
        if self.by_batch_groups(inputs):
            keeps = self.shortlist.group_keeps(sources, inputs.union_groups, prefix, self.device)
        results: list[list[Hypothesis]] = [[Hypothesis([], 0.0, [])] for _ in sources]
        todo = [i for i, s in enumerate(sources) if s]
        for batch in make_batches(
            [len(sources[i]) for i in todo], batch_tokens=batch_tokens, max_sentences=max_sentences
        ):
            ids = [todo[j] for j in batch]  # the batch's sentences, by their position in ``sources``
            hyps = self.batch(
                model,
                [sources[i] for i in ids],
                ids,
                prefix=None if prefix is None else [prefix[i] for i in ids],
                constraints=None if constraints is None else [constraints[i] for i in ids],
                keeps=self.batch_keeps(sources, ids, prefix, keeps),  # (B, W) or None
            )
            for i, h in zip(ids, hyps):
                results[i] = h
            if on_batch is not None:
                on_batch(len(batch))
        return results

    def by_batch_groups(self, inputs: SentenceInputs) -> bool:
        """Whether the shortlist searches groups' unions (the scope "batch" with union_groups)."""
        return (
            self.shortlist is not None and self.shortlist.scope == "batch" and inputs.union_groups is not None
        )

    def batch_keeps(
        self, sources: list[list[int]], ids: list[int], prefix: list[list[int]] | None, keeps: list | None
    ) -> torch.Tensor | None:
        """The ids (B, W) each sentence ``ids`` of a batch is searched over: its own list (the
        shortlist's scope "sentence", made per batch, never for every source at once), its group's
        union (``keeps``), or None (its batch's union, or no shortlist)."""
        if self.shortlist is not None and self.shortlist.scope == "sentence":
            mine = None if prefix is None else [prefix[i] for i in ids]
            return self.shortlist.sentence_keeps([sources[i] for i in ids], mine, self.device)  # (B, W)
        return None if keeps is None else torch.stack([keeps[i] for i in ids])  # (B, W)

    def batch(
        self,
        model,
        rows: list[list[int]],
        ids: list[int],
        *,
        prefix: list[list[int]] | None,
        constraints: list[list[list[int]]] | None,
        keeps: torch.Tensor | None = None,
    ) -> list[list[Hypothesis]]:
        """The hypotheses of one batch of sources (``ids``: their sentence numbers in the input);
        ``keeps`` (B, W): the ids each sentence is searched over (else the batch's union)."""
        width = max(map(len, rows))
        src = torch.tensor([r + [PAD] * (width - len(r)) for r in rows], device=self.device)  # (B, S)
        restriction = None
        if self.shortlist is not None:  # the target ids searched over (nmt.infer.shortlist)
            if keeps is None:
                restriction = self.shortlist.restrict(model, src, prefix)
            else:
                restriction = self.shortlist.restrict_rows(model, keeps)
            model, prefix = restriction.model, restriction.to_positions(prefix)
        with torch.inference_mode(), autocast(self.device, self.dtype):
            hyps = self.search(model, src, ids, prefix=prefix, constraints=constraints)
        return hyps if restriction is None else restriction.to_ids(hyps)

    def search(
        self,
        model,
        src: torch.Tensor,
        ids: list[int],
        *,
        prefix: list[list[int]] | None,
        constraints: list[list[list[int]]] | None,
    ) -> list[list[Hypothesis]]:
        """beam_search of ``src`` (B, S), or one sample per row (sentence i's stream seeded with
        (seed, i), ``ids`` giving i)."""
        sampling = self.options.sampling
        if sampling is None:
            return beam_search(
                model,
                src,
                self.options,
                prefix=prefix,
                allowed_tokens=self.allowed_tokens,
                constraints=constraints,
            )
        rngs = [sentence_rng(sampling.seed, i) for i in ids]
        return [[h] for h in sample(model, src, self.options, rngs=rngs, prefix=prefix)]


def translate_ids(
    model,
    src_id_lists: list[list[int]],
    options: SearchOptions = SearchOptions(),
    *,
    batch_tokens: int = 2048,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | None = None,
    allowed_tokens=None,
) -> list[list[int]]:
    """Best output ids (no BOS/EOS) for each source given as pieces without EOS (as stored by
    `nmt prepare`); too-long sources are truncated to the model's positions, an empty source
    gives []. ``options``: how to search (alpha None: beam 1 is greedy). ``allowed_tokens``: beam_search's.
    The model is put in eval mode and restored."""
    eos = getattr(model.cfg, "source_eos", True)  # a stand-in model's cfg may lack it
    sources = [add_eos(ids, model.cfg.max_positions, eos=eos)[0] if len(ids) else [] for ids in src_id_lists]
    was_training = model.training
    model.eval()
    try:
        search = BatchedSearch(options, device=device, dtype=dtype, allowed_tokens=allowed_tokens)
        hyps = search.sources(model, sources, batch_tokens=batch_tokens)
    finally:
        model.train(was_training)
    return [h[0].tokens if h else [] for h in hyps]  # none: allowed_tokens left nothing to finish


# ----------------------------------------------------------------------------- loading
def check_checkpoint_ids(directory: Path, config: dict, sp) -> None:
    """The special ids of a checkpoint's data (config.json["data"]["special_ids"], the meta.json it
    was trained on) and of its spm.model must be nmt.vocab's; CheckpointError naming the file."""
    from ..checkpoint import CheckpointError

    data = config.get("data") if isinstance(config, dict) else None
    recorded = {"pad": sp.pad_id(), "unk": sp.unk_id(), "bos": sp.bos_id(), "eos": sp.eos_id()}
    try:
        check_special_ids(
            data.get("special_ids") if isinstance(data, dict) else None,
            f"{directory / 'config.json'} (data.special_ids)",
        )
        check_special_ids(recorded, str(directory / "spm.model"))
    except ValueError as e:
        raise CheckpointError(str(e)) from None


def pick_device(device: str | None, precision: str) -> torch.device:
    """``device``, by default CUDA where there is one, except for int8 (dynamic quantization runs on
    the CPU); TranslateError for int8 on another device."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() and precision != "int8" else "cpu"))
    if precision == "int8" and device.type != "cpu":
        raise TranslateError(f"precision int8 runs on CPU only, not on {device}")
    return device


def own_target(sp, tgt_sp) -> bytes | None:
    """The bytes of a checkpoint's own target side's SentencePiece model ``tgt_sp``; None where it
    has none (``tgt_sp`` is its ``sp``, as nmt.vocab.load_spm gives it then)."""
    return None if tgt_sp is sp else tgt_sp.serialized_model_proto()


def load_models(
    paths: list, *, device: torch.device, precision: str, dtype: torch.dtype | None
) -> tuple[list, object, object]:
    """Each checkpoint's model ready for inference (int8: quantized; float32 on the CPU: linear
    layers with packed weights) and the SentencePiece models they share, id for id: the source
    side's and the target side's (nmt.vocab.load_spm; TranslateError naming the spm.model or
    target_spm.model that differs from the first checkpoint's)."""
    from ..checkpoint import CheckpointError, load_model, resolve_checkpoint

    models, sp, tgt_sp = [], None, None
    for path in paths:
        model, config = load_model(path, device=device)
        try:
            this = load_spm(resolve_checkpoint(path))
            this_tgt = load_spm(resolve_checkpoint(path), side="target", source=this)
        except ValueError as e:  # unreadable spm.model or target_spm.model
            raise CheckpointError(str(e)) from None
        check_checkpoint_ids(resolve_checkpoint(path), config, this)
        if precision == "int8":
            model = quantize_int8(model)
        elif device.type == "cpu" and dtype is None:  # float32 on the CPU: oneDNN, packed weights
            model = pack_linears(model.eval())
        models.append(model)
        if sp is None:
            sp, tgt_sp = this, this_tgt
        elif pieces(this) != pieces(sp):  # an ensemble: one vocabulary, id for id
            raise TranslateError(
                f"{resolve_checkpoint(path) / SPM}: an ensemble needs one vocabulary, and "
                f"its pieces differ from those of {resolve_checkpoint(paths[0]) / SPM}"
            )
        elif own_target(this, this_tgt) != own_target(sp, tgt_sp):
            raise TranslateError(
                f"{resolve_checkpoint(path)}: an ensemble needs one segmentation of the target side, and "
                f"its {TARGET_SPM} (or its lack of one) is not that of {resolve_checkpoint(paths[0])}"
            )
    return models, sp, tgt_sp


# ----------------------------------------------------------------------------- text in, text out
def load_ctranslate2(checkpoint, device, precision: str, shortlist, shortlist_scope: str | None):
    """``Translator.load`` with ``engine="ctranslate2"``: one checkpoint or export, its shortlist as
    CTranslate2's vocabulary map, which is per batch (the scope "sentence" is refused)."""
    if shortlist_scope == "sentence":
        raise TranslateError(
            "shortlist scope 'sentence': CTranslate2's vocabulary map is per batch "
            "(use the torch engine, or the scope 'batch')"
        )
    if isinstance(checkpoint, (list, tuple)):
        if len(checkpoint) != 1:
            raise TranslateError("engine ctranslate2: one checkpoint (ensembles need the torch engine)")
        checkpoint = checkpoint[0]
    return CTranslate2Translator.load(checkpoint, device=device, precision=precision, shortlist=shortlist)


class Translator(TextTranslator):
    """A model (or an Ensemble) with its SentencePiece model, searched by nmt.infer.search: text in,
    text out. ``Translator.load`` also gives the CTranslate2 engine's translator."""

    engine = "torch"  # where the search runs (nmt.infer.engine_ctranslate2's: "ctranslate2")

    def __init__(
        self,
        model,
        sp,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | None = None,
        shortlist=None,
        tgt_sp=None,
        shortlist_scope: str | None = None,
    ):
        """``sp``: the SentencePiece model of the sources; ``tgt_sp``: that of target text (None: ``sp``);
        ``shortlist_scope``: as ``use_shortlist``'s ``scope``."""
        for m in model.models if isinstance(model, Ensemble) else [model]:
            m.eval()
        self.model, self.sp, self.device, self.dtype = model, sp, torch.device(device), dtype
        self.tgt_sp = sp if tgt_sp is None else tgt_sp
        self.shortlist = None  # nmt.infer.shortlist.Shortlist: every search scores its pieces only
        if shortlist is not None:
            self.use_shortlist(shortlist, scope=shortlist_scope)

    def use_shortlist(self, shortlist, *, scope: str | None = None) -> None:
        """Search over a vocabulary shortlist from now on (a file of `nmt shortlist` or a
        Shortlist, checked against this model's vocabulary); None: the full vocabulary again.
        ``scope`` (nmt.infer.shortlist.SCOPES): each sentence over its own list ("sentence", a file's
        default) or over its batch's union ("batch"); None: the Shortlist's own."""
        from .shortlist import ShortlistError, for_translator

        try:
            self.shortlist = None if shortlist is None else for_translator(shortlist, self.sp, self.model.cfg)
            if self.shortlist is not None and scope is not None:
                self.shortlist = dataclasses.replace(self.shortlist, scope=scope)
        except ShortlistError as e:
            raise TranslateError(str(e)) from None

    @classmethod
    def load(
        cls,
        checkpoint: str | Path | list[str | Path],
        *,
        device: str | None = None,
        precision: str = "auto",
        engine: str = "torch",
        shortlist=None,
        shortlist_scope: str | None = None,
    ) -> TextTranslator:
        """A checkpoint directory or a run directory (its best / latest checkpoint); a list of them
        is an ensemble (nmt.infer.search.Ensemble), which needs one SentencePiece model.
        ``precision="int8"``: linear layers in int8 on CPU (nmt.infer.quantize; the default device
        then is the CPU, also where CUDA is available); float32 on the
        CPU: linear layers through oneDNN with packed weights (nmt.infer.packed).
        ``engine="ctranslate2"``: search in CTranslate2 (nmt.infer.engine_ctranslate2; also takes
        `nmt export ctranslate2` output; one checkpoint, no ensemble). ``shortlist``: a file of
        `nmt shortlist` (or a Shortlist): search only its union of target pieces per batch
        (nmt.infer.shortlist; CTranslate2: its vocabulary map); None (the default): the one checkpoint's
        own shortlist where it carries one (nmt.infer.shortlist.of_checkpoint), else the full
        vocabulary; False: the full vocabulary. ``shortlist_scope``: "sentence" (the default: each
        sentence over its own list, whatever it is batched with) or "batch" (its batch's union, as
        CTranslate2's vocabulary map, which is always per batch)."""
        if engine not in ENGINES:
            raise ValueError(f"engine={engine!r}: choose 'torch' or 'ctranslate2'")
        shortlist = checkpoint_shortlist(checkpoint) if shortlist is None else shortlist or None
        if engine == "ctranslate2":
            return load_ctranslate2(checkpoint, device, precision, shortlist, shortlist_scope)
        from ..allocator import keep_freed_memory

        paths = list(checkpoint) if isinstance(checkpoint, (list, tuple)) else [checkpoint]
        device = pick_device(device, precision)
        if device.type == "cpu":  # a decoding step's logits (rows x vocabulary) exceed glibc's mmap threshold
            keep_freed_memory()
        dtype = None if precision == "int8" else resolve_precision(precision, device)[0]
        models, sp, tgt_sp = load_models(paths, device=device, precision=precision, dtype=dtype)
        try:
            model = models[0] if len(models) == 1 else Ensemble(models)
        except ValueError as e:  # e.g. left-to-right and right-to-left models together
            raise TranslateError(str(e)) from None
        translator = cls(
            model,
            sp,
            device=device,
            dtype=dtype,
            shortlist=shortlist,
            tgt_sp=tgt_sp,
            shortlist_scope=shortlist_scope,
        )
        translator.data = training_data(paths[0])
        translator.calibration = calibration_of(paths[0])
        translator.source_words = source_words(translator.data)
        return translator

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
        constraints: list[list[str]] | None = None,
        union_groups: list | None = None,
        **fields,
    ) -> list[list[Translation]]:
        """Up to ``options.nbest`` translations per sentence, best first, searched with ``options``
        (nmt.infer.options.SearchOptions; its fields may also be given as keywords, ``beam=4``,
        which change ``options``). ``on_truncate(index, n_pieces)`` is called for each sentence cut
        to the model's positions (default: a warning counting sentences from 1). One str instead of
        a list gives the one sentence's list of translations. ``prefix[i]``: text translation i
        must start with ("" = none). ``constraints[i]``: phrases (text) translation i must contain,
        in any order (nmt.infer.constraints; [] = none). ``union_groups[i]``: a shortlist's union is
        that of sentence i's group, not of its batch."""
        options = with_fields(options, fields)
        sources, truncated = self.encode(sentences)
        constraint_ids = None
        if constraints is not None:
            if prefix is not None or options.sampling is not None:
                raise TranslateError("constraints: beam search only (not with a prefix or sampling)")
            constraint_ids = self.constraint_ids(sources, constraints, options)
        prefix_ids = None if prefix is None else self.prefix_ids(prefix, n_sentences=len(sentences))
        self.report_truncated(truncated, on_truncate)
        inputs = SentenceInputs(prefix=prefix_ids, constraints=constraint_ids, union_groups=union_groups)
        hyps = self.search_sources(sources, inputs, options, batch_tokens=batch_tokens, on_batch=on_batch)
        return [[Translation(self.decode(h.tokens), h.score, h.tokens) for h in hs] for hs in hyps]

    def search_sources(
        self,
        sources: list[list[int]],
        inputs: SentenceInputs,
        options: SearchOptions,
        *,
        batch_tokens: int,
        on_batch: Callable[[int], None] | None,
    ) -> list[list[Hypothesis]]:
        """BatchedSearch over the shortlist (if any). With a shortlist and constraints, the sentences
        with phrases are searched over the full vocabulary (a phrase's pieces need not be in a
        union) and the others over the shortlist, each set in searches of its own, so that a
        sentence's output does not depend on the phrases of the sentences beside it."""

        def search(shortlist, picked: list[int], sub: SentenceInputs) -> list[list[Hypothesis]]:
            run = BatchedSearch(options, device=self.device, dtype=self.dtype, shortlist=shortlist)
            return run.sources(
                self.model, [sources[i] for i in picked], sub, batch_tokens=batch_tokens, on_batch=on_batch
            )

        everyone = list(range(len(sources)))
        if self.shortlist is None or inputs.constraints is None:
            return search(self.shortlist, everyone, inputs)
        inputs.check(len(sources))
        held = [i for i in everyone if inputs.constraints[i]]
        free = [i for i in everyone if not inputs.constraints[i]]
        groups = inputs.union_groups
        results: list[list[Hypothesis]] = [[] for _ in sources]
        for picked, shortlist, sub in (
            (held, None, SentenceInputs(constraints=[inputs.constraints[i] for i in held])),
            (free, self.shortlist, SentenceInputs(union_groups=groups and [groups[i] for i in free])),
        ):
            for i, hyps in zip(picked, search(shortlist, picked, sub) if picked else []):
                results[i] = hyps
        return results

    def forced_scores(
        self, sources: list[list[int]], outputs: list[list[int]], *, coverage: bool = False
    ) -> list[ForcedScores]:
        """Each output's pieces' log-probabilities (and the sources' coverage) by teacher forcing
        (nmt.infer.confidence); an ensemble: its first model's."""
        model = self.model.models[0] if isinstance(self.model, Ensemble) else self.model
        return forced_scores(model, sources, outputs, coverage=coverage)

    def prefix_ids(self, prefix: list[str], *, n_sentences: int) -> list[list[int]]:
        """The target prefixes (text, one per sentence, "" = none) as pieces of ``tgt_sp``, each
        leaving room for EOS; TranslateError for a right-to-left model (it writes the end first), a count
        that is not ``n_sentences``, or a prefix as long as the model's positions; TypeError
        (naming the prefix, from 1) for anything but a list of str."""
        if right_to_left(self.model):
            raise TranslateError(
                "a right-to-left model writes the end of the output first: "
                "prefix-constrained decoding needs a left-to-right model"
            )
        check_strings(prefix, item="prefix", expected="prefix: expected a list of str (one per sentence)")
        if len(prefix) != n_sentences:
            raise TranslateError(f"{len(prefix)} prefixes for {n_sentences} sentences")
        cleaned = [clean_line(p) for p in prefix]
        prefix_ids = [ids if text else [] for text, ids in zip(cleaned, self.tgt_sp.encode(cleaned))]
        for i, ids in enumerate(prefix_ids):
            if len(ids) + 1 > self.model.cfg.max_positions:
                raise TranslateError(
                    f"prefix {i + 1}: {len(ids)} pieces leave no room for EOS "
                    f"(model.max_positions={self.model.cfg.max_positions})"
                )
        return prefix_ids

    def constraint_ids(
        self, sources: list[list[int]], constraints: list[list[str]], options: SearchOptions = SearchOptions()
    ) -> list[list[list[int]]]:
        """The phrases ``constraints[i]`` (text) of each source (ids from ``encode``) as target ids
        (nmt.infer.constraints.encode_constraints), each sentence's checked against its maximum
        output length: ConstraintsError naming the sentence (from 1), TypeError for wrong types."""
        max_len = [
            output_lengths(self.model, torch.tensor([s]), options, prefix=None)[0] if s else 0
            for s in sources
        ]
        try:
            return encode_constraints(
                self.tgt_sp, constraints, max_len=max_len, right_to_left=right_to_left(self.model)
            )
        except ValueError as e:
            raise ConstraintsError(str(e)) from None


# ----------------------------------------------------------------------------- text files (for the commands)
def read_text_lines(path: str, *, errors: str = "strict") -> list[str]:
    """Lines of a UTF-8 text file ("-" = stdin, .gz ok) via nmt.data.read_lines; invalid UTF-8
    raises TranslateError naming the line unless ``errors="replace"`` (U+FFFD)."""
    try:
        return list(read_lines(path, errors=errors))
    except DataError as e:
        hint = "; use --errors replace to translate it anyway" if "invalid UTF-8" in str(e) else ""
        raise TranslateError(f"{e}{hint}") from None


def check_output(path: str) -> None:
    """TranslateError unless ``path`` ("-" = stdout) can be written: not a folder, in an existing
    writable folder (a probe file is created there and removed), not a read-only file."""
    if path == "-":
        return
    p = Path(path)
    if p.is_dir():
        raise TranslateError(f"{p}: is a directory; -o takes a file name")
    if not p.parent.is_dir():
        raise TranslateError(f"{p}: cannot write: folder {p.parent} does not exist")
    if p.exists() and not os.access(p, os.W_OK):
        raise TranslateError(f"{p}: cannot write: the file is read-only")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{p.name}.tmp-", dir=p.parent)
    except OSError as e:
        raise TranslateError(f"{p}: cannot write in {p.parent} ({e.strerror})") from None
    os.close(fd)
    os.unlink(probe)


def write_output(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file in the same folder, renamed): a
    failure leaves no partial output, and an existing file is replaced whole or not at all."""
    p = Path(path)
    try:
        write_text(p, text)
    except OSError as e:
        raise TranslateError(f"{p}: cannot write ({e.strerror})") from None
