"""Translation: batching by tokens, the Python API (`Translator`) and `nmt translate`.

    from nmt import Translator
    t = Translator.load("runs/wmt14/checkpoints/best")
    t.translate(["Hello world."], beam=4)                 # -> ["Hallo Welt."]
    t.translate_nbest(["Hello world."], beam=4, nbest=2)  # -> [[Translation(text, score, tokens), ...]]
    t.translate(["Hello world."], beam=8, mbr=MBR())       # MBR among the beam's 8-best (nmt.infer.mbr)
    t.translate(["Hello world."], constraints=[["Welt"]])  # outputs holding the phrases (nmt.infer.constraints)

Sentences are cleaned as at training time (strip, NFC), encoded with the checkpoint's
SentencePiece model, given EOS, sorted by length into batches of at most ``batch_tokens`` padded
source tokens, searched (nmt.search), and returned in input order. An empty sentence translates
to an empty string without calling the model; a sentence longer than the model's positions is
truncated (with a warning naming it, sentences counted from 1). ``translate`` also takes one
str and returns one str; anything but str in the list is a TypeError naming its position.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from ..data.batching import make_batches  # the one length batcher (training uses its pack)
from ..data.prepare import DataError, clean_line, read_lines
from ..precision import autocast, resolve as resolve_precision
from ..vocab import check_special_ids
from .constraints import encode_constraints
from .mbr import MBR, add_mbr_args, mbr_from_args, mbr_pick_all
from .packed import pack_linears
from .rerank import Rerank, add_rerank_args, load_rerank, rerank_results
from .search import (EOS, PAD, STOPPING, Ensemble, Hypothesis, beam_search, output_lengths, reading_order,
                     right_to_left, sample, sentence_rng)


class TranslateError(Exception):
    """A user-facing error of `nmt translate` (bad input, bad option); the message says which."""


class ConstraintsError(TranslateError):
    """Lexical constraints that cannot be searched for; the message names the line (from 1)."""


@dataclass
class Translation:
    text: str
    score: float  # sum of log-probabilities / lp(|Y|), |Y| counting EOS (see nmt.search)
    tokens: list[int]  # output ids in the model's order (a right-to-left model's: last piece first)


@dataclass
class Sampling:
    """Sample one output per sentence instead of searching (nmt.infer.search.sample):
    softmax(logits / temperature), restricted to the ``topk`` (0: all) most probable tokens and the
    ``topp`` nucleus; sentence i of the input draws from a stream seeded by (seed, i)."""

    temperature: float = 1.0
    topk: int = 0
    topp: float = 1.0
    seed: int = 0


def mbr_results(results: list[list[Translation]], mbr: MBR) -> list[list[Translation]]:
    """Each sentence's n-best reduced to its MBR choice (nmt.infer.mbr), as a one-item list."""
    picks = mbr_pick_all([[(t.text, t.score) for t in r] for r in results], utility=mbr.utility,
                         temperature=mbr.temperature)
    return [[r[p]] if p >= 0 else r for r, p in zip(results, picks)]


# ----------------------------------------------------------------------------- ids in, ids out
def default_alpha(beam: int) -> float:
    """The paper's length penalty alpha=0.6 for beam search; 0 for beam 1 (plain greedy search)."""
    return 0.0 if beam == 1 else 0.6


def add_eos(pieces: list[int], max_positions: int) -> tuple[list[int], bool]:
    """pieces + [EOS], cut to ``max_positions`` tokens; returns (tokens, was_truncated)."""
    cut = len(pieces) > max_positions - 1
    return list(pieces[: max_positions - 1]) + [EOS], cut


def search_sources(model, sources: list[list[int]], *, beam: int = 4, alpha: float | None = None,
                   max_len_a: float = 1.0, max_len_b: int = 50, min_len: int = 1, nbest: int = 1,
                   batch_tokens: int = 2048, max_sentences: int | None = None,
                   device: str | torch.device = "cpu", dtype: torch.dtype | None = None,
                   on_batch: Callable[[int], None] | None = None,
                   prefix: list[list[int]] | None = None,
                   sampling: Sampling | None = None, stopping: str = "exact",
                   constraint=None, shortlist=None,
                   constraints: list[list[list[int]]] | None = None) -> list[list[Hypothesis]]:
    """Search every source (token ids ending with EOS; an empty list gives one empty hypothesis
    with score 0) in length-sorted batches; results in input order. ``on_batch(n)`` after each.
    ``prefix[i]``: target ids output i must start with; ``sampling``: sample instead of search;
    ``constraint``: beam_search's (search only); ``shortlist``: an nmt.infer.shortlist.Shortlist,
    each batch searched over its union only; ``constraints[i]``: target phrases (ids) output i must
    contain (nmt.infer.constraints; search only, not with a shortlist)."""
    device = torch.device(device)
    if constraint is not None and sampling is not None:
        raise ValueError("constraint: only for beam/greedy search, not sampling")
    if constraint is not None and shortlist is not None:
        raise ValueError("constraint: masks the full vocabulary, not a shortlist's (use one or the other)")
    if constraints is not None and (sampling is not None or shortlist is not None):
        raise ValueError("constraints: only for beam/greedy search over the full vocabulary, not sampling "
                         "or a shortlist")
    alpha = default_alpha(beam) if alpha is None else alpha
    results: list[list[Hypothesis]] = [[Hypothesis([], 0.0, [])] for _ in sources]
    todo = [i for i, s in enumerate(sources) if s]
    for batch in make_batches([len(sources[i]) for i in todo], batch_tokens=batch_tokens,
                              max_sentences=max_sentences):
        rows = [sources[todo[j]] for j in batch]
        width = max(map(len, rows))
        src = torch.tensor([r + [PAD] * (width - len(r)) for r in rows], device=device)  # (B, S)
        pre = None if prefix is None else [prefix[todo[j]] for j in batch]
        searched = model
        if shortlist is not None:  # the batch's union of target ids (nmt.infer.shortlist)
            restriction = shortlist.restrict(model, src, pre)
            searched, pre = restriction.model, restriction.to_positions(pre)
        with torch.inference_mode(), autocast(device, dtype):
            if sampling is None:
                hyps = beam_search(searched, src, beam=beam, alpha=alpha, max_len_a=max_len_a,
                                   max_len_b=max_len_b, min_len=min_len, nbest=nbest, prefix=pre,
                                   stopping=stopping, constraint=constraint,
                                   constraints=None if constraints is None else [constraints[todo[j]] for j in batch])
            else:
                rngs = [sentence_rng(sampling.seed, todo[j]) for j in batch]
                hyps = [[h] for h in sample(
                    searched, src, rngs=rngs, temperature=sampling.temperature, topk=sampling.topk,
                    topp=sampling.topp, max_len_a=max_len_a, max_len_b=max_len_b, min_len=min_len,
                    prefix=pre)]
        if shortlist is not None:
            hyps = restriction.to_ids(hyps)
        for j, h in zip(batch, hyps):
            results[todo[j]] = h
        if on_batch is not None:
            on_batch(len(batch))
    return results


def translate_ids(model, src_id_lists: list[list[int]], *, beam: int = 4, alpha: float | None = None,
                  max_len_a: float = 1.0, max_len_b: int = 50, batch_tokens: int = 2048,
                  device: str | torch.device = "cpu", dtype: torch.dtype | None = None,
                  constraint=None) -> list[list[int]]:
    """Best output ids (no BOS/EOS) for each source given as pieces without EOS (as stored by
    `nmt prepare`); too-long sources are truncated to the model's positions, an empty source
    gives []. alpha None: default_alpha(beam) (beam 1 is greedy). ``constraint``: beam_search's.
    The model is put in eval mode and restored."""
    sources = [add_eos(ids, model.cfg.max_positions)[0] if len(ids) else [] for ids in src_id_lists]
    was_training = model.training
    model.eval()
    try:
        hyps = search_sources(model, sources, beam=beam, alpha=alpha, max_len_a=max_len_a,
                              max_len_b=max_len_b, batch_tokens=batch_tokens, device=device, dtype=dtype,
                              constraint=constraint)
    finally:
        model.train(was_training)
    return [h[0].tokens if h else [] for h in hyps]  # none: a constraint left nothing to finish


# ----------------------------------------------------------------------------- text in, text out
def truncation_message(index: int, n_pieces: int, limit: int) -> str:
    """The warning for a sentence cut to the model's positions (API and CLI; counted from 1)."""
    return f"line {index + 1}: {n_pieces} pieces, truncated to {limit - 1} (model.max_positions={limit})"


def check_sentences(sentences) -> None:
    """TypeError unless ``sentences`` is a list/tuple of str (naming the first bad item, from 1)."""
    if not isinstance(sentences, (list, tuple)):
        raise TypeError(f"sentences: expected a str or a list of str, got {type(sentences).__name__}")
    for i, s in enumerate(sentences):
        if not isinstance(s, str):
            raise TypeError(f"sentence {i + 1}: expected str, got {type(s).__name__}")


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


def check_checkpoint_ids(directory: Path, config: dict, sp) -> None:
    """The special ids of a checkpoint's data (config.json["data"]["special_ids"], the meta.json it
    was trained on) and of its spm.model must be nmt.vocab's; CheckpointError naming the file."""
    from ..checkpoint import CheckpointError

    data = config.get("data") if isinstance(config, dict) else None
    recorded = {"pad": sp.pad_id(), "unk": sp.unk_id(), "bos": sp.bos_id(), "eos": sp.eos_id()}
    try:
        check_special_ids(data.get("special_ids") if isinstance(data, dict) else None,
                          f"{directory / 'config.json'} (data.special_ids)")
        check_special_ids(recorded, str(directory / "spm.model"))
    except ValueError as e:
        raise CheckpointError(str(e)) from None


def pieces(sp) -> list[str]:
    """The vocabulary of a SentencePiece model: its pieces in id order."""
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


class Translator:
    """A model with its SentencePiece model: text in, text out."""

    engine = "torch"  # where the search runs (nmt.infer.engine_ctranslate2's subclass: "ctranslate2")

    def __init__(self, model, sp, *, device: str | torch.device = "cpu", dtype: torch.dtype | None = None,
                 shortlist=None):
        for m in model.models if isinstance(model, Ensemble) else [model]:
            m.eval()
        self.model, self.sp, self.device, self.dtype = model, sp, torch.device(device), dtype
        self.shortlist = None  # nmt.infer.shortlist.Shortlist: every search scores its batch's union only
        if shortlist is not None:
            self.use_shortlist(shortlist)

    def use_shortlist(self, shortlist) -> None:
        """Search over a vocabulary shortlist from now on (a file of `nmt shortlist` or a
        Shortlist, checked against this model's vocabulary); None: the full vocabulary again."""
        from .shortlist import ShortlistError, for_translator

        try:
            self.shortlist = None if shortlist is None else for_translator(shortlist, self.sp, self.model.cfg)
        except ShortlistError as e:
            raise TranslateError(str(e)) from None

    @classmethod
    def load(cls, checkpoint: str | Path | list[str | Path], *, device: str | None = None,
             precision: str = "auto", engine: str = "torch", shortlist=None) -> "Translator":
        """A checkpoint directory or a run directory (its best / latest checkpoint); a list of them
        is an ensemble (nmt.infer.search.Ensemble), which needs one SentencePiece model.
        ``precision="int8"``: linear layers in int8 on CPU (nmt.infer.quantize; the default device
        then is the CPU, also where CUDA is available); float32 on the
        CPU: linear layers through oneDNN with packed weights (nmt.infer.packed).
        ``engine="ctranslate2"``: search in CTranslate2 (nmt.infer.engine_ctranslate2; also takes
        `nmt export ctranslate2` output; one checkpoint, no ensemble). ``shortlist``: a file of
        `nmt shortlist` (or a Shortlist): search only its union of target pieces per batch
        (nmt.infer.shortlist; CTranslate2: its vocabulary map)."""
        if engine not in ("torch", "ctranslate2"):
            raise ValueError(f"engine={engine!r}: choose 'torch' or 'ctranslate2'")
        if engine == "ctranslate2":
            from .engine_ctranslate2 import CTranslate2Translator

            if isinstance(checkpoint, (list, tuple)):
                if len(checkpoint) != 1:
                    raise TranslateError("engine ctranslate2: one checkpoint (ensembles need the torch engine)")
                checkpoint = checkpoint[0]

            return CTranslate2Translator.load(checkpoint, device=device, precision=precision, shortlist=shortlist)

        from ..allocator import keep_freed_memory
        from ..checkpoint import load_model, load_spm, resolve

        paths = list(checkpoint) if isinstance(checkpoint, (list, tuple)) else [checkpoint]
        # the default device: CUDA where there is one, except for int8 (dynamic quantization runs on CPU)
        device = torch.device(device or ("cuda" if torch.cuda.is_available() and precision != "int8" else "cpu"))
        if device.type == "cpu":  # a decoding step's logits (rows x vocabulary) exceed glibc's mmap threshold
            keep_freed_memory()
        if precision == "int8":
            if device.type != "cpu":
                raise TranslateError(f"precision int8 runs on CPU only, not on {device}")
            from .quantize import quantize_int8

            dtype = None
        else:
            dtype, _ = resolve_precision(precision, device)
        models, sp = [], None
        for path in paths:
            model, config = load_model(path, device=device)
            this = load_spm(resolve(path))
            check_checkpoint_ids(resolve(path), config, this)
            if precision == "int8":
                model = quantize_int8(model)
            elif device.type == "cpu" and dtype is None:  # float32 on the CPU: oneDNN, packed weights
                model = pack_linears(model.eval())
            models.append(model)
            if sp is None:
                sp = this
            elif pieces(this) != pieces(sp):  # an ensemble: one vocabulary, id for id
                raise TranslateError(f"{resolve(path) / 'spm.model'}: an ensemble needs one vocabulary, and "
                                     f"its pieces differ from those of {resolve(paths[0]) / 'spm.model'}")
        try:
            model = models[0] if len(models) == 1 else Ensemble(models)
        except ValueError as e:  # e.g. left-to-right and right-to-left models together
            raise TranslateError(str(e)) from None
        return cls(model, sp, device=device, dtype=dtype, shortlist=shortlist)

    def encode(self, sentences: list[str]) -> tuple[list[list[int]], list[tuple[int, int]]]:
        """Token ids (+EOS; [] for an empty sentence) and (index, n_pieces) of truncated ones."""
        cleaned = [clean_line(s) for s in sentences]
        pieces = self.sp.encode(cleaned) if cleaned else []
        sources, truncated = [], []
        for i, (text, ids) in enumerate(zip(cleaned, pieces)):
            if not text:
                sources.append([])
                continue
            tokens, cut = add_eos(ids, self.model.cfg.max_positions)
            sources.append(tokens)
            if cut:
                truncated.append((i, len(ids)))
        return sources, truncated

    def decode(self, tokens: list[int]) -> str:
        """Detokenized text on one line (any line break the pieces might carry becomes a space)."""
        text = self.sp.decode(reading_order(self.model, tokens)) if tokens else ""
        return text.replace("\r", " ").replace("\n", " ")

    @one_or_many
    def translate_nbest(self, sentences: list[str] | str, *, beam: int = 4, alpha: float | None = None,
                        max_len_a: float = 1.0, max_len_b: int = 50, nbest: int = 1,
                        batch_tokens: int = 2048, on_truncate: Callable[[int, int], None] | None = None,
                        on_batch: Callable[[int], None] | None = None, prefix: list[str] | None = None,
                        sampling: Sampling | None = None, stopping: str = "exact",
                        constraints: list[list[str]] | None = None) -> list[list[Translation]]:
        """Up to ``nbest`` translations per sentence, best first. ``on_truncate(index, n_pieces)``
        is called for each sentence cut to the model's positions (default: a warning counting
        sentences from 1). ``alpha`` None: default_alpha(beam), so beam 1 is greedy search. One str
        instead of a list gives the one sentence's list of translations.
        ``prefix[i]``: text translation i must start with ("" = none); ``sampling``: one sampled
        translation per sentence instead of beam search; ``stopping``: "exact" (the paper's early
        termination) or "fast" (CTranslate2's rule, see nmt.infer.search). ``constraints[i]``:
        phrases (text) translation i must contain, in any order (nmt.infer.constraints; [] = none)."""
        sources, truncated = self.encode(sentences)
        constraint_ids = None
        if constraints is not None:
            if prefix is not None or sampling is not None or self.shortlist is not None:
                raise TranslateError("constraints: beam search over the full vocabulary only (not with a prefix, "
                                     "sampling or a shortlist)")
            constraint_ids = self.constraint_ids(sources, constraints, max_len_a=max_len_a, max_len_b=max_len_b)
        prefix_ids = None
        if prefix is not None:
            if right_to_left(self.model):
                raise TranslateError("a right-to-left model writes the end of the output first: "
                                     "prefix-constrained decoding needs a left-to-right model")
            if len(prefix) != len(sentences):
                raise TranslateError(f"{len(prefix)} prefixes for {len(sentences)} sentences")
            cleaned = [clean_line(p) for p in prefix]
            prefix_ids = [ids if text else [] for text, ids in zip(cleaned, self.sp.encode(cleaned))]
            for i, ids in enumerate(prefix_ids):
                if len(ids) + 1 > self.model.cfg.max_positions:
                    raise TranslateError(f"prefix {i + 1}: {len(ids)} pieces leave no room for EOS "
                                         f"(model.max_positions={self.model.cfg.max_positions})")
        limit = self.model.cfg.max_positions
        for i, n in truncated:
            if on_truncate is not None:
                on_truncate(i, n)
            else:
                warnings.warn(truncation_message(i, n, limit))
        hyps = search_sources(self.model, sources, beam=beam, alpha=alpha, max_len_a=max_len_a,
                              max_len_b=max_len_b, nbest=nbest, batch_tokens=batch_tokens,
                              device=self.device, dtype=self.dtype, on_batch=on_batch,
                              prefix=prefix_ids, sampling=sampling, stopping=stopping, shortlist=self.shortlist,
                              constraints=constraint_ids)
        return [[Translation(self.decode(h.tokens), h.score, h.tokens) for h in hs] for hs in hyps]

    def constraint_ids(self, sources: list[list[int]], constraints: list[list[str]], *, max_len_a: float = 1.0,
                       max_len_b: int = 50) -> list[list[list[int]]]:
        """The phrases ``constraints[i]`` (text) of each source (ids from ``encode``) as target ids
        (nmt.infer.constraints.encode_constraints), each sentence's checked against its maximum
        output length: ConstraintsError naming the sentence (from 1), TypeError for wrong types."""
        max_len = [output_lengths(self.model, torch.tensor([s]), max_len_a=max_len_a, max_len_b=max_len_b,
                                  prefix=None)[0] if s else 0 for s in sources]
        try:
            return encode_constraints(self.sp, constraints, max_len=max_len, right_to_left=right_to_left(self.model))
        except ValueError as e:
            raise ConstraintsError(str(e)) from None

    @one_or_many
    def translate(self, sentences: list[str] | str, *, beam: int = 4, alpha: float | None = None,
                  max_len_a: float = 1.0, max_len_b: int = 50, batch_tokens: int = 2048,
                  prefix: list[str] | None = None, sampling: Sampling | None = None,
                  stopping: str | None = None, mbr: MBR | None = None,
                  rerank: Rerank | None = None, constraints: list[list[str]] | None = None) -> list[str]:
        """The best translation of each sentence; one str in, one str out. ``alpha`` None:
        default_alpha(beam) (the CLI's default too: beam 1 is greedy search, alpha 0); ``stopping``
        None: the engine's own rule ("exact" for torch, "fast" for CTranslate2). ``mbr``: the
        minimum-Bayes-risk choice among the beam's ``beam``-best instead of the top one;
        ``rerank``: the best of the beam's ``beam``-best rescored with a second (right-to-left)
        model (nmt.infer.rerank). ``constraints[i]``: phrases translation i must contain (see
        translate_nbest; the torch engine only)."""
        if constraints is not None and self.engine != "torch":
            raise TranslateError("constraints: the torch engine's beam search only (not CTranslate2)")
        if (mbr is not None or rerank is not None) and sampling is not None:
            raise TranslateError("mbr and rerank choose among the beam's n-best: not with sampling")
        if mbr is not None and rerank is not None:
            raise TranslateError("choose one of mbr and rerank")
        results = self.translate_nbest(
            sentences, beam=beam, alpha=alpha, max_len_a=max_len_a, max_len_b=max_len_b,
            nbest=1 if mbr is None and rerank is None else beam, batch_tokens=batch_tokens, prefix=prefix,
            sampling=sampling, **({} if stopping is None else {"stopping": stopping}),
            **({} if constraints is None else {"constraints": constraints}))
        if mbr is not None:
            results = mbr_results(results, mbr)
        elif rerank is not None:
            results = self.rerank(sentences, results, rerank, alpha=default_alpha(beam) if alpha is None else alpha,
                                  batch_tokens=batch_tokens)
        return [t[0].text for t in results]

    def rerank(self, sentences: list[str], results: list[list[Translation]], rerank: Rerank, *,
               alpha: float, batch_tokens: int = 2048) -> list[list[Translation]]:
        """``results`` (this translator's n-best of ``sentences``) reordered by the combined score
        of nmt.infer.rerank; TranslateError when the rescoring model's vocabulary differs."""
        if self.engine != "torch" or rerank.translator.engine != "torch":
            raise TranslateError("rerank: the torch engine's n-best, rescored by torch models (not CTranslate2)")
        if pieces(rerank.translator.sp) != pieces(self.sp):
            raise TranslateError("rerank: the rescoring model's vocabulary differs from the searching model's "
                                 "(they must share one SentencePiece model, id for id)")
        sources, _ = self.encode(sentences)
        return rerank_results(results, sources, self, rerank, alpha=alpha, batch_tokens=batch_tokens)


# ----------------------------------------------------------------------------- CLI
def read_text_lines(path: str, *, errors: str = "strict") -> list[str]:
    """Lines of a UTF-8 text file ("-" = stdin, .gz ok) via nmt.data.read_lines; invalid UTF-8
    raises TranslateError naming the line unless ``errors="replace"`` (U+FFFD)."""
    try:
        return list(read_lines(path, errors=errors))
    except DataError as e:
        hint = "; use --errors replace to translate it anyway" if "invalid UTF-8" in str(e) else ""
        raise TranslateError(f"{e}{hint}") from None


def add_translate_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", nargs="+",
                        help="checkpoint directory or run directory; several: an ensemble averaging "
                             "their log-probabilities per step (one vocabulary)")
    parser.add_argument("-i", "--input", default="-", help="raw text, one sentence per line (default: stdin)")
    parser.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    parser.add_argument("--beam", type=int, default=4, help="beam size (paper: 4; 1 = greedy)")
    parser.add_argument("--alpha", type=float, default=None,
                        help="length penalty ((5+|Y|)/6)^alpha (default: the paper's 0.6; 0 with --beam 1, "
                             "which is then plain greedy search)")
    parser.add_argument("--max-len-a", type=float, default=1.0, help="max output length a*|x|+b (paper: a=1)")
    parser.add_argument("--max-len-b", type=int, default=50, help="(paper: b=50)")
    parser.add_argument("--stopping", choices=STOPPING, default=None,
                        help="beam search early termination: exact (default, the paper's: stop when no active "
                             "hypothesis can still win) or fast (CTranslate2's: stop when the best extension "
                             "is EOS or beam hypotheses have finished; fewer steps, may differ; the only "
                             "rule of --engine ctranslate2)")
    parser.add_argument("--nbest", type=int, default=1,
                        help="K > 1: write up to K lines per input, 'LINE<TAB>SCORE<TAB>TEXT'")
    parser.add_argument("--batch-tokens", type=int, default=2048, help="padded source tokens per batch")
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16", "auto", "int8"), default="auto",
                        help="auto: bf16 autocast only where nmt.precision finds it fast; fp16: CUDA only; int8: "
                             "dynamic int8 linear layers (CPU; the default --device then)")
    parser.add_argument("--prefix-file", default=None,
                        help="one target prefix per input line: each output starts with it (empty line: none)")
    parser.add_argument("--constraints", default=None, metavar="FILE",
                        help="terminology: one line per input line holding the target phrases its output must "
                             "contain, separated by tabs, in any order (empty line: none); beam search with "
                             "dynamic beam allocation (Post & Vilar 2018); torch engine, not with --sampling, "
                             "--prefix-file or --shortlist")
    add_mbr_args(parser)
    add_rerank_args(parser)
    parser.add_argument("--sampling", action="store_true",
                        help="sample one output per line instead of beam search")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling: softmax(logits / T)")
    parser.add_argument("--topk", type=int, default=0, help="sampling: only the K most probable tokens (0: all)")
    parser.add_argument("--topp", type=float, default=1.0, help="sampling: only the top-p nucleus (1: all)")
    parser.add_argument("--seed", type=int, default=0, help="sampling: seed (line i always draws the same)")
    parser.add_argument("--device", default=None,
                        help="cpu, cuda, ... (default: cuda if available; cpu for --precision int8)")
    parser.add_argument("--errors", choices=("strict", "replace"), default="strict",
                        help="invalid UTF-8 input: an error naming the line, or U+FFFD")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or precision note")
    parser.add_argument("--threads", type=int, default=0,
                        help="CPU threads for torch (torch.set_num_threads; default 0: torch's choice)")
    parser.add_argument("--engine", choices=("torch", "ctranslate2"), default="torch",
                        help="ctranslate2: CHECKPOINT may also be an `nmt export ctranslate2` directory")
    parser.add_argument("--shortlist", default=None, metavar="FILE",
                        help="score only the target pieces of this vocabulary shortlist (`nmt shortlist`) that a "
                             "batch's source makes likely, normalised over them (faster; outputs may differ); "
                             "--engine ctranslate2: its vocabulary map (MODEL_DIR/vmap.txt)")
    parser.add_argument("--alignment", action="store_true",
                        help="append '<TAB>s-t ...' per output: source-output piece alignment from the last "
                             "layer's encoder-decoder attention averaged over heads (fairseq's convention)")


def run_translate(args: argparse.Namespace, overrides: dict) -> int:
    from tqdm import tqdm

    if overrides:
        raise TranslateError(f"--{next(iter(overrides))}.*: translate takes no configuration overrides")
    if args.beam < 1 or not 1 <= args.nbest <= args.beam:
        raise TranslateError(f"--beam {args.beam} --nbest {args.nbest}: need beam >= 1 and 1 <= nbest <= beam")
    if args.batch_tokens < 1:
        raise TranslateError(f"--batch-tokens {args.batch_tokens}: must be positive")
    check_options(args)
    if args.alpha is None:
        args.alpha = default_alpha(args.beam)
    check_output(args.output)  # before translating anything
    sampling = None
    if args.sampling:
        if args.nbest != 1:
            raise TranslateError(f"--sampling --nbest {args.nbest}: sampling gives one output per line")
        if not (args.temperature > 0 and args.topk >= 0 and 0 < args.topp <= 1):
            raise TranslateError(f"--temperature {args.temperature} --topk {args.topk} --topp {args.topp}: "
                                 "need T > 0, K >= 0 (0: all), 0 < P <= 1")
        sampling = Sampling(args.temperature, args.topk, args.topp, args.seed)
    mbr = mbr_from_args(args)
    if mbr is not None and (args.sampling or args.nbest != 1):
        raise TranslateError(f"--mbr chooses one output among the beam's n-best: needs --beam >= 2, --nbest 1 "
                             f"and no --sampling (got --nbest {args.nbest}{' --sampling' if args.sampling else ''})")
    if args.rerank and (args.sampling or mbr is not None):
        raise TranslateError("--rerank chooses among the beam's n-best: not with --sampling or --mbr")
    if args.alignment and (len(args.checkpoint) > 1 or args.engine != "torch"):
        raise TranslateError("--alignment reads one torch model's cross-attention: not with an ensemble "
                             "or --engine ctranslate2")
    rerank = load_rerank(args, args.rerank_weight)  # options checked before anything is read
    lines = read_text_lines(args.input, errors=args.errors)
    prefix = None
    if args.prefix_file is not None:
        prefix = read_text_lines(args.prefix_file, errors=args.errors)
        if len(prefix) != len(lines):
            raise TranslateError(f"{args.prefix_file}: {len(prefix)} prefix lines for {len(lines)} input lines")
    constraints = None
    if args.constraints is not None:  # target phrases separated by tabs (nmt.infer.constraints)
        if args.sampling or prefix is not None or args.shortlist is not None or args.engine != "torch":
            raise TranslateError("--constraints: the torch engine's beam search over the full vocabulary (not with "
                                 "--sampling, --prefix-file, --shortlist or --engine ctranslate2)")
        constraints = [line.split("\t") for line in read_text_lines(args.constraints, errors=args.errors)]
        if len(constraints) != len(lines):
            raise TranslateError(f"{args.constraints}: {len(constraints)} constraint lines for {len(lines)} input lines")
    from ..checkpoint import CheckpointError
    from .export_ctranslate2 import ExportError

    int8 = args.precision == "int8"
    try:
        if args.engine != "torch" and int8:
            raise TranslateError("--precision int8 is the torch engine's; for CTranslate2 use "
                                 "`nmt export ctranslate2 --quantization int8`")
        translator = Translator.load(args.checkpoint if args.engine == "torch" else args.checkpoint,
                                     device=args.device, engine=args.engine, shortlist=args.shortlist,
                                     precision=("int8" if int8 else "fp32") if args.engine == "torch" else args.precision)
    except (CheckpointError, ExportError) as e:
        raise TranslateError(str(e)) from None
    if args.engine != "torch":
        reason = f"ctranslate2 compute type {translator.model.translator.compute_type}"
    elif int8:
        reason = "int8 dynamic quantization of the linear layers (requested)"
    else:
        reason = set_precision(translator, args.precision)
    if not args.quiet:
        print(f"nmt translate: precision: {reason}", file=sys.stderr)
    limit = translator.model.cfg.max_positions

    def warn(i: int, n: int) -> None:
        print(f"nmt translate: warning: {truncation_message(i, n, limit)}", file=sys.stderr)

    bar = tqdm(total=sum(1 for s in lines if s.strip()), unit="sent", file=sys.stderr,
               disable=args.quiet or args.input == "-")
    try:
        results = translator.translate_nbest(
            lines, beam=args.beam, alpha=args.alpha, max_len_a=args.max_len_a, max_len_b=args.max_len_b,
            nbest=args.beam if mbr or rerank else args.nbest, batch_tokens=args.batch_tokens, on_truncate=warn,
            on_batch=bar.update, prefix=prefix, sampling=sampling,
            **({} if args.stopping is None else {"stopping": args.stopping}),
            **({} if constraints is None else {"constraints": constraints}))
    except ConstraintsError as e:  # its line is the constraints file's
        raise TranslateError(f"{args.constraints}: {e}") from None
    bar.close()
    if mbr is not None:
        results = mbr_results(results, mbr)
    elif rerank is not None:  # the beam's n-best reordered; --nbest K keeps the first K
        results = [r[:args.nbest] for r in translator.rerank(lines, results, rerank, alpha=args.alpha,
                                                              batch_tokens=args.batch_tokens)]
    if args.nbest == 1:
        out = [r[0].text for r in results]
    else:
        out = [f"{n}\t{t.score:.4f}\t{t.text}" for n, r in enumerate(results, start=1) for t in r]
    if args.alignment:  # nmt.infer.attention: last layer, heads averaged, 0-based piece indices
        from .attention import align, format_alignment

        sources, _ = translator.encode(lines)
        pairs = [format_alignment(align(translator.model, sources[i], t.tokens))
                 for i, r in enumerate(results) for t in r]
        out = [f"{line}\t{a}" for line, a in zip(out, pairs)]
    text = "".join(line + "\n" for line in out)
    if args.output == "-":
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.flush()
    else:
        write_output(args.output, text)
    return 0


def set_precision(translator: Translator, precision: str) -> str:
    """The CLI's --precision for a torch-engine translator loaded with precision "fp32" (packed
    float32 linears): sets its autocast dtype and returns why; fp16 on a CPU is a TranslateError."""
    try:
        translator.dtype, reason = resolve_precision(precision, translator.device)
    except ValueError as e:  # fp16 on a CPU
        raise TranslateError(f"--precision {precision} on {translator.device}: {e}") from None
    return reason


def check_options(args: argparse.Namespace) -> None:
    """Numbers, --device and --threads, checked before anything is read or loaded; sets threads."""
    for name in ("alpha", "max_len_a"):
        value = getattr(args, name)
        if value is not None and not math.isfinite(value):
            raise TranslateError(f"--{name.replace('_', '-')} {value}: must be a finite number")
    if args.max_len_a < 0 or args.max_len_b < 0:
        raise TranslateError(f"--max-len-a {args.max_len_a} --max-len-b {args.max_len_b}: must be >= 0")
    if args.threads < 0:
        raise TranslateError(f"--threads {args.threads}: must be >= 1 (0: torch's default)")
    if args.device is not None:
        try:
            device = torch.device(args.device)
        except (RuntimeError, ValueError):
            raise TranslateError(f"--device {args.device}: not a device name (cpu, cuda, cuda:1, ...)") from None
        try:
            torch.empty(1, device=device)
        except Exception as e:  # noqa: BLE001 (torch raises RuntimeError or AssertionError here)
            why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise TranslateError(f"--device {args.device}: not available on this machine ({why})") from None
    if args.threads:
        torch.set_num_threads(args.threads)


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
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.tmp-", dir=p.parent)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a plain write would give 0666 & ~umask
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
        os.replace(tmp, p)
        tmp = None
    except OSError as e:
        raise TranslateError(f"{p}: cannot write ({e.strerror})") from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
