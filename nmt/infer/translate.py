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
from .search import EOS, PAD, Ensemble, Hypothesis, beam_search, sample, sentence_rng


class TranslateError(Exception):
    """A user-facing error of `nmt translate` (bad input, bad option); the message says which."""


@dataclass
class Translation:
    text: str
    score: float  # sum of log-probabilities / lp(|Y|), |Y| counting EOS (see nmt.search)
    tokens: list[int]


@dataclass
class Sampling:
    """Sample one output per sentence instead of searching (nmt.infer.search.sample):
    softmax(logits / temperature), restricted to the ``topk`` (0: all) most probable tokens and the
    ``topp`` nucleus; sentence i of the input draws from a stream seeded by (seed, i)."""

    temperature: float = 1.0
    topk: int = 0
    topp: float = 1.0
    seed: int = 0


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
                   on_batch: Callable[[int], None] | None = None,
                   prefix: list[list[int]] | None = None,
                   sampling: Sampling | None = None) -> list[list[Hypothesis]]:
    """Search every source (token ids ending with EOS; an empty list gives one empty hypothesis
    with score 0) in length-sorted batches; results in input order. ``on_batch(n)`` after each.
    ``prefix[i]``: target ids output i must start with; ``sampling``: sample instead of search."""
    device = torch.device(device)
    results: list[list[Hypothesis]] = [[Hypothesis([], 0.0, [])] for _ in sources]
    todo = [i for i, s in enumerate(sources) if s]
    for batch in make_batches([len(sources[i]) for i in todo], batch_tokens=batch_tokens,
                              max_sentences=max_sentences):
        rows = [sources[todo[j]] for j in batch]
        width = max(map(len, rows))
        src = torch.tensor([r + [PAD] * (width - len(r)) for r in rows], device=device)  # (B, S)
        pre = None if prefix is None else [prefix[todo[j]] for j in batch]
        with torch.inference_mode(), autocast(device, dtype):
            if sampling is None:
                hyps = beam_search(model, src, beam=beam, alpha=alpha, max_len_a=max_len_a,
                                   max_len_b=max_len_b, min_len=min_len, nbest=nbest, prefix=pre)
            else:
                rngs = [sentence_rng(sampling.seed, todo[j]) for j in batch]
                hyps = [[h] for h in sample(
                    model, src, rngs=rngs, temperature=sampling.temperature, topk=sampling.topk,
                    topp=sampling.topp, max_len_a=max_len_a, max_len_b=max_len_b, min_len=min_len,
                    prefix=pre)]
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


def bleu_on_split(model, data_dir: str | Path, split: str, *, beam: int = 1, alpha: float | None = None,
                  max_sentences: int = 0, device: str | torch.device = "cpu",
                  amp_dtype: torch.dtype | None = None, batch_tokens: int = 2048) -> dict:
    """sacreBLEU of the model on a prepared split (validation during training): translates the
    split's source ids, detokenizes, scores against ``{split}.{tgt_lang}.txt``. ``alpha`` defaults
    to 0 for beam 1 (greedy) and the paper's 0.6 otherwise; ``max_sentences`` > 0: the first N."""
    from ..data.prepare import ParallelDataset, load_spm
    from ..metrics import corpus_scores

    data = ParallelDataset.load(data_dir, split)
    tgt_lang = data.meta.get("tgt_lang", "")
    n = len(data) if max_sentences <= 0 else min(max_sentences, len(data))
    refs = (Path(data_dir) / f"{split}.{tgt_lang}.txt").read_text(encoding="utf-8").split("\n")[:n]
    ids = translate_ids(model, [data[i][0].tolist() for i in range(n)], beam=beam,
                        alpha=default_alpha(beam) if alpha is None else alpha,
                        batch_tokens=batch_tokens, device=device, dtype=amp_dtype)
    sp = load_spm(data_dir)
    hyps = [sp.decode(h) if h else "" for h in ids]
    s = corpus_scores(hyps, [refs], tokenize="zh" if tgt_lang == "zh" else "13a")
    return {"bleu": s.bleu, "chrf": s.chrf, "bleu_signature": s.bleu_signature}


# ----------------------------------------------------------------------------- text in, text out
def pieces(sp) -> list[str]:
    """The vocabulary of a SentencePiece model: its pieces in id order."""
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


class Translator:
    """A model with its SentencePiece model: text in, text out."""

    def __init__(self, model, sp, *, device: str | torch.device = "cpu", dtype: torch.dtype | None = None):
        for m in model.models if isinstance(model, Ensemble) else [model]:
            m.eval()
        self.model, self.sp, self.device, self.dtype = model, sp, torch.device(device), dtype

    @classmethod
    def load(cls, checkpoint: str | Path | list[str | Path], *, device: str | None = None,
             precision: str = "auto") -> "Translator":
        """A checkpoint directory or a run directory (its best / latest checkpoint); a list of them
        is an ensemble (nmt.infer.search.Ensemble), which needs one SentencePiece model.
        ``precision="int8"``: linear layers in int8 on CPU (nmt.infer.quantize)."""
        import sentencepiece as spm

        from ..checkpoint import load_model, resolve

        paths = list(checkpoint) if isinstance(checkpoint, (list, tuple)) else [checkpoint]
        device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if precision == "int8":
            if device.type != "cpu":
                raise TranslateError(f"precision int8 runs on CPU only, not on {device}")
            from .quantize import quantize_int8

            dtype = None
        else:
            dtype, _ = resolve_precision(precision, device)
        models, sp = [], None
        for path in paths:
            model, _ = load_model(path, device=device)
            models.append(quantize_int8(model) if precision == "int8" else model)
            this = spm.SentencePieceProcessor(model_file=str(resolve(path) / "spm.model"))
            if sp is None:
                sp = this
            elif pieces(this) != pieces(sp):  # an ensemble: one vocabulary, id for id
                raise TranslateError(f"{resolve(path) / 'spm.model'}: an ensemble needs one vocabulary, and "
                                     f"its pieces differ from those of {resolve(paths[0]) / 'spm.model'}")
        return cls(models[0] if len(models) == 1 else Ensemble(models), sp, device=device, dtype=dtype)

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
                        on_batch: Callable[[int], None] | None = None, prefix: list[str] | None = None,
                        sampling: Sampling | None = None) -> list[list[Translation]]:
        """Up to ``nbest`` translations per sentence, best first. ``on_truncate(index, n_pieces)``
        is called for each sentence cut to the model's positions (default: a warning).
        ``prefix[i]``: text translation i must start with ("" = none); ``sampling``: one sampled
        translation per sentence instead of beam search."""
        sources, truncated = self.encode(sentences)
        prefix_ids = None
        if prefix is not None:
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
                warnings.warn(f"sentence {i}: {n} pieces, truncated to {limit - 1} (model.max_positions={limit})")
        hyps = search_sources(self.model, sources, beam=beam, alpha=alpha, max_len_a=max_len_a,
                              max_len_b=max_len_b, nbest=nbest, batch_tokens=batch_tokens,
                              device=self.device, dtype=self.dtype, on_batch=on_batch,
                              prefix=prefix_ids, sampling=sampling)
        return [[Translation(self.decode(h.tokens), h.score, h.tokens) for h in hs] for hs in hyps]

    def translate(self, sentences: list[str], *, beam: int = 4, alpha: float = 0.6,
                  max_len_a: float = 1.0, max_len_b: int = 50, batch_tokens: int = 2048,
                  prefix: list[str] | None = None, sampling: Sampling | None = None) -> list[str]:
        """The best translation of each sentence (beam=1, alpha=0 for greedy search)."""
        return [t[0].text for t in self.translate_nbest(
            sentences, beam=beam, alpha=alpha, max_len_a=max_len_a, max_len_b=max_len_b,
            batch_tokens=batch_tokens, prefix=prefix, sampling=sampling)]


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
    parser.add_argument("--nbest", type=int, default=1,
                        help="K > 1: write up to K lines per input, 'LINE<TAB>SCORE<TAB>TEXT'")
    parser.add_argument("--batch-tokens", type=int, default=2048, help="padded source tokens per batch")
    parser.add_argument("--precision", choices=("fp32", "bf16", "auto", "int8"), default="auto",
                        help="auto: bf16 autocast only where nmt.precision finds it fast; int8: dynamic "
                             "int8 linear layers (CPU)")
    parser.add_argument("--prefix-file", default=None,
                        help="one target prefix per input line: each output starts with it (empty line: none)")
    parser.add_argument("--sampling", action="store_true",
                        help="sample one output per line instead of beam search")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling: softmax(logits / T)")
    parser.add_argument("--topk", type=int, default=0, help="sampling: only the K most probable tokens (0: all)")
    parser.add_argument("--topp", type=float, default=1.0, help="sampling: only the top-p nucleus (1: all)")
    parser.add_argument("--seed", type=int, default=0, help="sampling: seed (line i always draws the same)")
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
    sampling = None
    if args.sampling:
        if args.nbest != 1:
            raise TranslateError(f"--sampling --nbest {args.nbest}: sampling gives one output per line")
        if not (args.temperature > 0 and args.topk >= 0 and 0 < args.topp <= 1):
            raise TranslateError(f"--temperature {args.temperature} --topk {args.topk} --topp {args.topp}: "
                                 "need T > 0, K >= 0 (0: all), 0 < P <= 1")
        sampling = Sampling(args.temperature, args.topk, args.topp, args.seed)
    lines = read_text_lines(args.input, errors=args.errors)
    prefix = None
    if args.prefix_file is not None:
        prefix = read_text_lines(args.prefix_file, errors=args.errors)
        if len(prefix) != len(lines):
            raise TranslateError(f"{args.prefix_file}: {len(prefix)} prefix lines for {len(lines)} input lines")
    from ..checkpoint import CheckpointError

    int8 = args.precision == "int8"
    try:
        translator = Translator.load(args.checkpoint, device=args.device, precision="int8" if int8 else "fp32")
    except CheckpointError as e:
        raise TranslateError(str(e)) from None
    if int8:
        reason = "int8 dynamic quantization of the linear layers (requested)"
    else:
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
        nbest=args.nbest, batch_tokens=args.batch_tokens, on_truncate=warn, on_batch=bar.update,
        prefix=prefix, sampling=sampling)
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
