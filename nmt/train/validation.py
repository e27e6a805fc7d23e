"""Validation during training: the valid split's loss inputs (truncated to the model's
positions, as translation truncates) and its BLEU (greedy or beam search, sacreBLEU)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..data.batching import Batch, TokenBatchSampler
from ..data.dataset import ParallelDataset
from ..data.lines import read_lines
from ..infer.options import SearchOptions
from ..infer.search import reading_order
from ..infer.translate import translate_ids
from ..metrics import corpus_scores
from ..vocab import load_spm


def too_long(dataset: ParallelDataset, max_positions: int) -> int:
    """How many pairs have a side that does not fit ``max_positions`` with its EOS / BOS."""
    return int(
        np.count_nonzero(
            (dataset.src_lengths + 1 > max_positions) | (dataset.tgt_lengths + 1 > max_positions)
        )
    )


def truncate(pair: tuple[np.ndarray, np.ndarray], max_positions: int) -> tuple[np.ndarray, np.ndarray]:
    """Cut both sides to ``max_positions - 1`` pieces (collate adds EOS / BOS)."""
    return pair[0][: max_positions - 1], pair[1][: max_positions - 1]


@torch.no_grad()
def valid_loss(
    dataset: ParallelDataset,
    *,
    max_tokens: int,
    batch_of: Callable[[list[int]], Batch],
    loss_of: Callable[[Batch], tuple[torch.Tensor, torch.Tensor, int]],
) -> dict:
    """The loss, nll and perplexity per target token of ``dataset``, in batches of <= ``max_tokens``
    tokens taken in length order; ``batch_of``: the batch of some pair indices, ``loss_of``: its
    (loss, nll, target tokens) sums."""
    sampler = TokenBatchSampler(
        src_lengths=dataset.src_lengths, tgt_lengths=dataset.tgt_lengths, max_tokens=max_tokens, shuffle=False
    )
    loss_sum = nll_sum = tokens = 0.0
    for indices in sampler.batches(0):
        loss, nll, n = loss_of(batch_of(indices))
        loss_sum, nll_sum, tokens = loss_sum + loss.item(), nll_sum + nll.item(), tokens + n
    return {"loss": loss_sum / tokens, "nll": nll_sum / tokens, "ppl": math.exp(min(nll_sum / tokens, 50))}


def reference_lines(data_dir: str | Path, split: str, n: int) -> list[str]:
    """The first ``n`` target lines of a prepared split, read as every other text is read
    (`read_lines`: only "\\n" ends a line, so a "\\r" inside a line never shifts the others)."""
    data = ParallelDataset.load(data_dir, split)
    path = Path(data_dir) / f"{split}.{data.meta.get('tgt_lang', '')}.txt"
    refs = []
    for line in read_lines(path):
        if len(refs) == n:
            break
        refs.append(line)
    return refs


def bleu_on_split(
    model,
    data_dir: str | Path,
    split: str,
    options: SearchOptions = SearchOptions(beam=1),
    *,
    max_sentences: int = 0,
    device: str | torch.device = "cpu",
    amp_dtype: torch.dtype | None = None,
    batch_tokens: int = 2048,
) -> dict:
    """sacreBLEU of the model on a prepared split: translates the split's source ids with ``options``
    (alpha None: 0 for beam 1, greedy, and the paper's 0.6 otherwise), detokenizes, scores against
    ``{split}.{tgt_lang}.txt``; ``max_sentences`` > 0: the first N."""
    data = ParallelDataset.load(data_dir, split)
    tgt_lang = data.meta.get("tgt_lang", "")
    n = len(data) if max_sentences <= 0 else min(max_sentences, len(data))
    refs = reference_lines(data_dir, split, n)
    sources = [data[i][0].tolist() for i in range(n)]
    return bleu_of_sources(
        model,
        sources,
        refs,
        sp=load_spm(data_dir, side="target"),
        options=options,
        tgt_lang=tgt_lang,
        device=device,
        amp_dtype=amp_dtype,
        batch_tokens=batch_tokens,
    )


def bleu_of_sources(
    model,
    sources: list[list[int]],
    references: list[str],
    *,
    sp,
    options: SearchOptions,
    tgt_lang: str,
    **search,
) -> dict:
    """sacreBLEU and chrF of the model's translations of ``sources`` (piece ids, no EOS) against
    ``references``, decoded with the SentencePiece model ``sp`` (the target side's); ``search``: device,
    amp_dtype, batch_tokens."""
    ids = translate_ids(
        model,
        sources,
        options,
        batch_tokens=search.get("batch_tokens", 2048),
        device=search.get("device", "cpu"),
        dtype=search.get("amp_dtype"),
    )
    hyps = [sp.decode(reading_order(model, h)) if h else "" for h in ids]
    s = corpus_scores(hyps, [references], tokenize="zh" if tgt_lang == "zh" else "13a")
    return {"bleu": s.bleu, "chrf": s.chrf, "bleu_signature": s.bleu_signature}
