"""Translation: batching by tokens, the Python API (`Translator`) and `nmt translate`.

    from nmt import Translator
    t = Translator.load("runs/wmt14/checkpoints/best")
    t.translate(["Hello world."], beam=4)                 # -> ["Hallo Welt."]
    t.translate_nbest(["Hello world."], beam=4, nbest=2)  # -> [[Translation(text, score, tokens), ...]]

Sentences are cleaned as at training time (strip, NFC), encoded with the checkpoint's
SentencePiece model, given EOS, sorted by length into batches of at most ``batch_tokens`` padded
source tokens, searched (nmt.search), and returned in input order. An empty sentence translates
to an empty string without calling the model; a sentence longer than the model's positions is
truncated (with a warning naming it).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from ..data.prepare import DataError, clean_line, read_lines
from ..precision import autocast, resolve as resolve_precision
from .search import EOS, PAD, Hypothesis, beam_search


class TranslateError(Exception):
    """A user-facing error of `nmt translate` (bad input, bad option); the message says which."""


@dataclass
class Translation:
    text: str
    score: float  # sum of log-probabilities / lp(|Y|), |Y| counting EOS (see nmt.search)
    tokens: list[int]


# ----------------------------------------------------------------------------- ids in, ids out
def default_alpha(beam: int) -> float:
    """The paper's length penalty alpha=0.6 for beam search; 0 for beam 1 (plain greedy search)."""
    return 0.0 if beam == 1 else 0.6


def add_eos(pieces: list[int], max_positions: int) -> tuple[list[int], bool]:
    """pieces + [EOS], cut to ``max_positions`` tokens; returns (tokens, was_truncated)."""
    cut = len(pieces) > max_positions - 1
    return list(pieces[: max_positions - 1]) + [EOS], cut


def make_batches(lengths: list[int], *, batch_tokens: int, max_sentences: int | None = None) -> list[list[int]]:
    """Indices grouped longest first so that each batch holds at most ``batch_tokens`` padded
    tokens (n_sentences * longest) and ``max_sentences`` sentences (always at least one)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches, current = [], []
    for i in order:
        longest = lengths[current[0]] if current else lengths[i]
        full = max_sentences is not None and len(current) >= max_sentences
        if current and (full or (len(current) + 1) * longest > batch_tokens):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def search_sources(model, sources: list[list[int]], *, beam: int = 4, alpha: float = 0.6,
                   max_len_a: float = 1.0, max_len_b: int = 50, min_len: int = 1, nbest: int = 1,
                   batch_tokens: int = 2048, max_sentences: int | None = None,
                   device: str | torch.device = "cpu", dtype: torch.dtype | None = None,
                   on_batch: Callable[[int], None] | None = None) -> list[list[Hypothesis]]:
    """Search every source (token ids ending with EOS; an empty list gives one empty hypothesis
    with score 0) in length-sorted batches; results in input order. ``on_batch(n)`` after each."""
    device = torch.device(device)
    results: list[list[Hypothesis]] = [[Hypothesis([], 0.0, [])] for _ in sources]
    todo = [i for i, s in enumerate(sources) if s]
    for batch in make_batches([len(sources[i]) for i in todo], batch_tokens=batch_tokens,
                              max_sentences=max_sentences):
        rows = [sources[todo[j]] for j in batch]
        width = max(map(len, rows))
        src = torch.tensor([r + [PAD] * (width - len(r)) for r in rows], device=device)  # (B, S)
        with torch.inference_mode(), autocast(device, dtype):
            hyps = beam_search(model, src, beam=beam, alpha=alpha, max_len_a=max_len_a,
                               max_len_b=max_len_b, min_len=min_len, nbest=nbest)
        for j, h in zip(batch, hyps):
            results[todo[j]] = h
        if on_batch is not None:
            on_batch(len(batch))
    return results


def translate_ids(model, src_id_lists: list[list[int]], *, beam: int = 4, alpha: float = 0.6,
                  max_len_a: float = 1.0, max_len_b: int = 50, batch_tokens: int = 2048,
                  device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> list[list[int]]:
    """Best output ids (no BOS/EOS) for each source given as pieces without EOS (as stored by
    `nmt prepare`); too-long sources are truncated to the model's positions, an empty source
    gives []. Greedy search: beam=1, alpha=0. The model is put in eval mode and restored."""
    sources = [add_eos(ids, model.cfg.max_positions)[0] if len(ids) else [] for ids in src_id_lists]
    was_training = model.training
    model.eval()
    try:
        hyps = search_sources(model, sources, beam=beam, alpha=alpha, max_len_a=max_len_a,
                              max_len_b=max_len_b, batch_tokens=batch_tokens, device=device, dtype=dtype)
    finally:
        model.train(was_training)
    return [h[0].tokens for h in hyps]


# ----------------------------------------------------------------------------- text in, text out
class Translator:
    """A model with its SentencePiece model: text in, text out."""

    def __init__(self, model, sp, *, device: str | torch.device = "cpu", dtype: torch.dtype | None = None):
        self.model, self.sp, self.device, self.dtype = model.eval(), sp, torch.device(device), dtype

    @classmethod
    def load(cls, checkpoint: str | Path, *, device: str | None = None, precision: str = "auto") -> "Translator":
        """A checkpoint directory or a run directory (its best / latest checkpoint)."""
        from ..checkpoint import load_model, load_spm, resolve

        device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        model, _ = load_model(checkpoint, device=device)
        sp = load_spm(resolve(checkpoint))
        dtype, _ = resolve_precision(precision, device)
        return cls(model, sp, device=device, dtype=dtype)

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
        text = self.sp.decode(tokens) if tokens else ""
        return text.replace("\r", " ").replace("\n", " ")

    def translate_nbest(self, sentences: list[str], *, beam: int = 4, alpha: float = 0.6,
                        max_len_a: float = 1.0, max_len_b: int = 50, nbest: int = 1,
                        batch_tokens: int = 2048, on_truncate: Callable[[int, int], None] | None = None,
                        on_batch: Callable[[int], None] | None = None) -> list[list[Translation]]:
        """Up to ``nbest`` translations per sentence, best first. ``on_truncate(index, n_pieces)``
        is called for each sentence cut to the model's positions (default: a warning)."""
        sources, truncated = self.encode(sentences)
        limit = self.model.cfg.max_positions
        for i, n in truncated:
            if on_truncate is not None:
                on_truncate(i, n)
            else:
                warnings.warn(f"sentence {i}: {n} pieces, truncated to {limit - 1} (model.max_positions={limit})")
        hyps = search_sources(self.model, sources, beam=beam, alpha=alpha, max_len_a=max_len_a,
                              max_len_b=max_len_b, nbest=nbest, batch_tokens=batch_tokens,
                              device=self.device, dtype=self.dtype, on_batch=on_batch)
        return [[Translation(self.decode(h.tokens), h.score, h.tokens) for h in hs] for hs in hyps]

    def translate(self, sentences: list[str], *, beam: int = 4, alpha: float = 0.6,
                  max_len_a: float = 1.0, max_len_b: int = 50, batch_tokens: int = 2048) -> list[str]:
        """The best translation of each sentence (beam=1, alpha=0 for greedy search)."""
        return [t[0].text for t in self.translate_nbest(
            sentences, beam=beam, alpha=alpha, max_len_a=max_len_a, max_len_b=max_len_b,
            batch_tokens=batch_tokens)]


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
    parser.add_argument("checkpoint", help="checkpoint directory or run directory")
    parser.add_argument("-i", "--input", default="-", help="raw text, one sentence per line (default: stdin)")
    parser.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    parser.add_argument("--beam", type=int, default=4, help="beam size (paper: 4; 1 = greedy)")
    parser.add_argument("--alpha", type=float, default=None,
                        help="length penalty ((5+|Y|)/6)^alpha (default: the paper's 0.6; 0 with --beam 1, "
                             "which is then plain greedy search)")
    parser.add_argument("--max-len-a", type=float, default=1.0, help="max output length a*|x|+b (paper: a=1)")
    parser.add_argument("--max-len-b", type=int, default=50, help="(paper: b=50)")
    parser.add_argument("--nbest", type=int, default=1,
                        help="K > 1: write up to K lines per input, 'LINE<TAB>SCORE<TAB>TEXT'")
    parser.add_argument("--batch-tokens", type=int, default=2048, help="padded source tokens per batch")
    parser.add_argument("--precision", choices=("fp32", "bf16", "auto"), default="auto",
                        help="auto: bf16 autocast only where nmt.precision finds it fast")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if available)")
    parser.add_argument("--errors", choices=("strict", "replace"), default="strict",
                        help="invalid UTF-8 input: an error naming the line, or U+FFFD")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or precision note")


def run_translate(args: argparse.Namespace, overrides: dict) -> int:
    from tqdm import tqdm

    if overrides:
        raise TranslateError(f"--{next(iter(overrides))}.*: translate takes no configuration overrides")
    if args.beam < 1 or not 1 <= args.nbest <= args.beam:
        raise TranslateError(f"--beam {args.beam} --nbest {args.nbest}: need beam >= 1 and 1 <= nbest <= beam")
    if args.batch_tokens < 1:
        raise TranslateError(f"--batch-tokens {args.batch_tokens}: must be positive")
    if args.alpha is None:
        args.alpha = default_alpha(args.beam)
    lines = read_text_lines(args.input, errors=args.errors)
    from ..checkpoint import CheckpointError

    try:
        translator = Translator.load(args.checkpoint, device=args.device, precision="fp32")
    except CheckpointError as e:
        raise TranslateError(str(e)) from None
    translator.dtype, reason = resolve_precision(args.precision, translator.device)
    if not args.quiet:
        print(f"nmt translate: precision: {reason}", file=sys.stderr)
    limit = translator.model.cfg.max_positions

    def warn(i: int, n: int) -> None:
        print(f"nmt translate: warning: line {i + 1}: {n} pieces, truncated to {limit - 1} "
              f"(model.max_positions={limit})", file=sys.stderr)

    bar = tqdm(total=sum(1 for s in lines if s.strip()), unit="sent", file=sys.stderr,
               disable=args.quiet or args.input == "-")
    results = translator.translate_nbest(
        lines, beam=args.beam, alpha=args.alpha, max_len_a=args.max_len_a, max_len_b=args.max_len_b,
        nbest=args.nbest, batch_tokens=args.batch_tokens, on_truncate=warn, on_batch=bar.update)
    bar.close()
    if args.nbest == 1:
        out = [r[0].text for r in results]
    else:
        out = [f"{n}\t{t.score:.4f}\t{t.text}" for n, r in enumerate(results, start=1) for t in r]
    text = "".join(line + "\n" for line in out)
    if args.output == "-":
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.flush()
    else:
        Path(args.output).write_text(text, encoding="utf-8", newline="\n")
    return 0
