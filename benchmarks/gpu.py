"""GPU speed of nmt: training MFU of the paper's `base` and `big`, decoding throughput
of `base`, in one table. On one H100 the rows fit ``--budget`` seconds (default 450: under 8
minutes with the start-up); without CUDA, or with ``--tiny``, tiny models run on the CPU in well
under a minute, so that CI and a machine without a GPU check the same code.

    python benchmarks/gpu.py                         # one GPU: ~7.5 minutes, one table
    python benchmarks/gpu.py --tiny                  # tiny sizes (automatic without CUDA)
    python benchmarks/gpu.py --checkpoint runs/multi30k-en-de/average \\
        --test-src ../shared/data/multi30k/test.en.gz --test-ref ../shared/data/multi30k/test.de.gz

Rows, in the order they run (the most wanted first; a row whose estimated seconds no longer fit
the budget is printed as skipped, and the plan with its estimate is printed before the table):
  peak    a large matrix product (8192^3 on a GPU) in bf16, and in float32 with TF32 allowed
  train   whole updates of nmt's own ``Trainer.train_step`` (nmt/train/trainer.py: autocast forward
          over the real target tokens, the fused label-smoothed loss, backward, fused Adam), its
          micro-batches drawn by its own sampler and collate, ~25k target tokens per update (5.1):
          micro-batches of at most ``--max-tokens`` padded tokens per side (halved after an
          out-of-memory error; the Trainer then accumulates more of them per update), random ids
          whose lengths follow newstest2014 (LOG_MEAN below); bf16 autocast and float32 with TF32
          matrix products ("tf32"), eager and torch.compile ("compile": every encoder and decoder
          layer compiled with dynamic shapes, so one compilation per layer type serves all six
          layers and every batch shape; tiny: backend "eager", Dynamo's capture alone)
  decode  `base` with random weights, output length fixed at 30: greedy and beam 4 at several
          batch sizes (sentences per batch) over newstest2014's sources (``--src-file``, words mapped
          to random ids; random lengths without it); with ``--checkpoint``, that model on
          ``--test-src`` with BLEU against ``--test-ref`` (sacreBLEU 13a; beam 4 with alpha 0.6)

Columns: target tok/s (train: real target tokens, EOS included; decode: pieces of the best
hypothesis + 1, as benchmarks/translate_speed.py), sent/s, step ms (train: one update; decode: one
batch), peak GiB (torch.cuda.max_memory_allocated within the row; "-" on the CPU), TFLOP/s (model
FLOPs below per second; peak rows: the product's), MFU (TFLOP/s over the peak measured in this run
for the row's precision), MFU sheet (over NVIDIA's dense datasheet peak, for GPUs in DATASHEET),
BLEU, note (data: share of the update spent drawing and collating micro-batches; pad: share of
padded positions; warm-up: seconds before timing, compilation included; cell: the row's seconds).

FLOPs (MFU's numerator; ``forward_flops``): matrix-product FLOPs of the real (non-pad) tokens, two
per multiply-add; an update is 3 x forward (backward: gradients of inputs and of weights). For one
sentence pair of s source positions (pieces + EOS) and t target positions (BOS + pieces), with
hk = n_heads * d_k, hv = n_heads * d_v, d = d_model, f = d_ff, W = target vocabulary:
    P = 2 d (2 hk + hv) + 2 hv d          q, k, v and output projections, per position
    F = 4 d f                             fc1 and fc2, per position
    encoder layer   s (P + F) + 2 s^2 (hk + hv)
    decoder layer   t (P + F) + 2 t^2 (hk + hv)                  (causal square counted whole)
                    + t (2 d hk + 2 hv d) + 2 s d (hk + hv)      (cross-attention projections)
                    + 2 t s (hk + hv)                            (cross-attention scores, weighted sum)
    output          2 t d W
Embeddings, softmax, LayerNorm, dropout, the loss and Adam are not counted. For `base` this is
about 6 x (non-embedding parameters + d W) per target token plus the attention squares.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from nmt.infer.options import SearchOptions

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/machine.py

from machine import provenance  # noqa: E402  (benchmarks/machine.py)

from nmt import attention as nmt_attention  # noqa: E402
from nmt.config import ModelConfig, TrainConfig, base, big, tiny  # noqa: E402
from nmt.data.binarize import write_offsets  # noqa: E402
from nmt.data.lines import clean_line, read_lines  # noqa: E402
from nmt.infer.translate import BatchedSearch, Translator, add_eos  # noqa: E402
from nmt.model import Transformer  # noqa: E402
from nmt.train.trainer import Trainer  # noqa: E402
from nmt.vocab import PAD, SPECIAL_IDS  # noqa: E402

COLUMNS = (
    "task",
    "model",
    "precision",
    "mode",
    "batch",
    "target tok/s",
    "sent/s",
    "step ms",
    "peak GiB",
    "TFLOP/s",
    "MFU",
    "MFU sheet",
    "BLEU",
    "note",
)

# Lengths of the random training pairs: source pieces ~ exp(N(LOG_MEAN, LOG_SD)), target = source x
# exp(N(0, RATIO_SD)), rounded, clipped to 1..250 (nmt prepare's --max-len). LOG_MEAN and LOG_SD are
# those of newstest2014's 3,003 English sentences in words x 1.3 pieces per word (a 37k BPE; median 22
# pieces, 95th percentile 49); RATIO_SD that of its German / English word-count ratio.
LOG_MEAN, LOG_SD, RATIO_SD, MAX_LEN = 3.11, 0.54, 0.2, 250

# NVIDIA's dense (no sparsity) datasheet peaks, TFLOP/s: bf16, TF32; the first name found in the GPU's wins
DATASHEET = {
    "H200": (989.4, 494.7),
    "H100 PCIe": (756.5, 378.0),
    "H100 NVL": (835.0, 417.5),
    "H100": (989.4, 494.7),
    "A100": (312.0, 156.0),
}


def forward_flops(cfg: ModelConfig, src_len, tgt_len):
    """Matrix-product FLOPs of the training forward pass of sentence pairs with ``src_len`` source
    and ``tgt_len`` target positions (ints or integer arrays: then per pair); see the docstring."""
    d, f, w = cfg.d_model, cfg.d_ff, cfg.tgt_vocab_size
    hk, hv = cfg.n_heads * cfg.d_k, cfg.n_heads * cfg.d_v
    s, t = src_len, tgt_len
    proj = 2 * d * (2 * hk + hv) + 2 * hv * d  # q, k, v, out per position
    ffn = 4 * d * f
    encoder = s * (proj + ffn) + 2 * s * s * (hk + hv)
    decoder = (
        t * (proj + ffn)
        + 2 * t * t * (hk + hv)
        + t * (2 * d * hk + 2 * hv * d)
        + 2 * s * d * (hk + hv)
        + 2 * t * s * (hk + hv)
    )
    return cfg.encoder_layers * encoder + cfg.decoder_layers * decoder + 2 * t * d * w


def update_flops(cfg: ModelConfig, micro: list) -> int:
    """3 x forward FLOPs of an update's micro-batches (Batch: real positions are the non-PAD ones)."""
    total = 0
    for b in micro:
        s = b.src.ne(PAD).sum(1).numpy().astype(np.int64)  # (B,) source pieces + EOS
        t = b.tgt_out.ne(PAD).sum(1).numpy().astype(np.int64)  # (B,) target positions
        total += int(forward_flops(cfg, s, t).sum())
    return 3 * total


def synthetic_lengths(n: int, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(source, target) lengths of ``n`` pairs as LOG_MEAN above describes."""
    rng = np.random.default_rng(seed)
    src = np.exp(rng.normal(LOG_MEAN, LOG_SD, n))  # (n,)
    tgt = src * np.exp(rng.normal(0.0, RATIO_SD, n))  # (n,)
    return tuple(np.clip(np.rint(x), 1, MAX_LEN).astype(np.int64) for x in (src, tgt))


def write_synthetic_data(folder: Path, *, vocab: int, pairs: int, seed: int = 0) -> dict:
    """A prepared data directory as `nmt prepare` writes it (meta.json, train.{src,tgt}.bin and
    offsets; no valid split) of ``pairs`` pairs of uniform random ids; returns its meta."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed + 1)
    lengths = dict(zip(("src", "tgt"), synthetic_lengths(pairs, seed=seed)))
    for side, n in lengths.items():
        rng.integers(len(SPECIAL_IDS), vocab, int(n.sum()), dtype=np.uint16).tofile(
            folder / f"train.{side}.bin"
        )
    counts = write_offsets(folder / "train", lengths)
    meta = {
        "format": "nmt-prepared-data",
        "version": 1,
        "dataset": "synthetic (benchmarks/gpu.py)",
        "vocab_size": vocab,
        "dtype": "uint16",
        "special_ids": dict(SPECIAL_IDS),
        "splits": {"train": {"pairs": pairs, **counts}},
    }
    (folder / "meta.json").write_text(json.dumps(meta, indent=2))
    return meta


@dataclass
class Sizes:
    """What differs between the GPU run and the tiny CPU run."""

    models: dict[str, ModelConfig]
    pairs: int  # random training pairs
    update_tokens: int
    max_tokens: int  # first micro-batch budget (padded tokens per side)
    matmul: int  # n of the peak's n x n x n product
    decode_batches: tuple[int, ...]
    random_sources: int  # sentences when there is no --src-file
    test_limit: int | None
    train_seconds: float  # timed part of a train row (at least min_updates)
    decode_seconds: float
    min_updates: int
    warmup: int  # untimed updates (compile rows: one more)
    backend: str  # torch.compile's
    budget: float
    estimate: dict[str, float]  # seconds: peak, train per model, compile, decode, bleu, profile


def gpu_sizes() -> Sizes:
    return Sizes(
        models={"base": base(37000), "big": big(37000)},
        pairs=60_000,
        update_tokens=25_000,
        max_tokens=25_000,
        matmul=8192,
        decode_batches=(512, 128, 32),
        random_sources=3003,
        test_limit=None,
        train_seconds=6.0,
        decode_seconds=5.0,
        min_updates=5,
        warmup=2,
        backend="inductor",
        budget=450.0,
        estimate={"peak": 4, "base": 15, "big": 22, "compile": 45, "decode": 8, "bleu": 12, "profile": 25},
    )


def tiny_sizes() -> Sizes:
    small = tiny(1000)
    return Sizes(
        models={"base": small, "big": dataclasses.replace(small, d_model=96, d_ff=192, n_heads=6)},
        pairs=2000,
        update_tokens=1200,
        max_tokens=600,
        matmul=1024,
        decode_batches=(16, 4),
        random_sources=24,
        test_limit=12,
        train_seconds=0.3,
        decode_seconds=0.2,
        min_updates=2,
        warmup=1,
        backend="eager",
        budget=60.0,
        estimate={"peak": 0.5, "base": 1.5, "big": 2, "compile": 4, "decode": 0.5, "bleu": 1, "profile": 3},
    )


# ----------------------------------------------------------------------------- measurements
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak(device: torch.device, dtype: torch.dtype, n: int, seconds: float = 1.0) -> float:
    """FLOP/s of an n x n x n product of random matrices (float32: TF32 as currently allowed)."""
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    sync(device)
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds / 4:  # how many fit a quarter
        a @ b
        reps += 1
        sync(device)
    reps = max(3, reps * 3)
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(device)
    return reps * 2 * n**3 / (time.perf_counter() - start)


def set_tf32(on: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def precision_label(precision: str, device: torch.device) -> str:
    """ "tf32" is float32 with TF32 matrix products on CUDA; on a CPU it is plain float32."""
    return "fp32" if precision == "tf32" and device.type != "cuda" else precision


def peak_memory(device: torch.device) -> str:
    return f"{torch.cuda.max_memory_allocated(device) / 2**30:.1f}" if device.type == "cuda" else "-"


def reset_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def compile_layers(model: Transformer, backend: str) -> None:
    """torch.compile every encoder and decoder layer in place (dynamic shapes): the layers of a
    stack share one compiled graph per layer type, and batch shapes do not recompile."""
    for layer in [*model.encoder.layers, *model.decoder.layers]:
        layer.compile(backend=backend, dynamic=True)


def compiled_graphs() -> int:
    """Graphs Dynamo has captured in this process (since the last torch._dynamo.reset)."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def new_trainer(
    cfg: ModelConfig,
    data: Path,
    meta: dict,
    work: Path,
    *,
    device: torch.device,
    precision: str,
    max_tokens: int,
    update_tokens: int,
) -> Trainer:
    train_cfg = TrainConfig(
        max_tokens=max_tokens,
        update_tokens=update_tokens,
        keep_last=1,
        precision="bf16" if precision == "bf16" else "fp32",
        valid_every_steps=0,
    )
    run = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    return Trainer(data, run, cfg, train_cfg, meta, device=str(device), progress=False)


def one_update(trainer: Trainer, stream) -> tuple[list, float, float, dict]:
    """One update as Trainer._loop makes it: (micro-batches, seconds drawing them, seconds in all, stats)."""
    start = time.perf_counter()
    micro = list(itertools.islice(stream, trainer.accum))
    total_tokens, _ = trainer.coll.sum(
        [sum(b.n_tgt_tokens for b in micro), not micro], what="the token count"
    )
    drawn = time.perf_counter()
    stats = trainer.train_step(micro, total_tokens)  # ends reading the loss: the GPU has finished
    return micro, drawn - start, time.perf_counter() - start, stats


def train_row(
    name: str,
    cfg: ModelConfig,
    precision: str,
    mode: str,
    *,
    sizes: Sizes,
    data: Path,
    meta: dict,
    work: Path,
    device: torch.device,
    peaks: dict,
    sheet: tuple | None,
) -> dict:
    cell_start = time.perf_counter()
    reset_memory(device)
    set_tf32(precision == "tf32")
    max_tokens, trainer = sizes.max_tokens, None
    while trainer is None:  # out of memory: halve the micro-batch, the Trainer accumulates more of them
        try:
            trainer = new_trainer(
                cfg,
                data,
                meta,
                work,
                device=device,
                precision=precision,
                max_tokens=max_tokens,
                update_tokens=sizes.update_tokens,
            )
            if mode == "compile":
                compile_layers(trainer.model, sizes.backend)
            stream = trainer.data.micro_batches(trainer.cfg)
            warm_start = time.perf_counter()
            for _ in range(sizes.warmup + (mode == "compile")):
                one_update(trainer, stream)
        except torch.cuda.OutOfMemoryError:
            if max_tokens // 2 <= MAX_LEN:  # a micro-batch must hold the longest pair
                raise
            trainer = stream = None
        if trainer is None:  # outside the except block: its traceback no longer holds the tensors
            reset_memory(device)
            max_tokens //= 2
    sync(device)
    warmup = time.perf_counter() - warm_start
    graphs = compiled_graphs()
    updates = tokens = sentences = flops = 0
    drawing = busy = 0.0
    padded = real = 0
    while busy < sizes.train_seconds or updates < sizes.min_updates:
        micro, drawn, seconds, stats = one_update(trainer, stream)
        updates, busy, drawing = updates + 1, busy + seconds, drawing + drawn
        tokens += stats["tokens"]
        sentences += sum(b.src.size(0) for b in micro)
        flops += update_flops(cfg, micro)
        padded += sum(b.src.numel() + b.tgt_out.numel() for b in micro)
        real += sum(b.n_src_tokens + b.n_tgt_tokens for b in micro)
    rate = flops / busy
    recompiled = compiled_graphs() - graphs  # graphs Dynamo made while timed: new shapes recompiled
    peak = peaks.get(precision)
    spec = sheet[0 if precision == "bf16" else 1] * 1e12 if sheet else None
    accum = trainer.accum
    del trainer, stream
    memory = peak_memory(device)
    if mode == "compile":
        torch._dynamo.reset()
        from torch._dynamo.utils import counters

        counters.clear()
    reset_memory(device)
    return {
        "task": "train",
        "model": name,
        "precision": precision_label(precision, device),
        "mode": mode if mode == "eager" or sizes.backend == "inductor" else f"compile ({sizes.backend})",
        "batch": f"{tokens / updates:,.0f} tok = {accum} x {max_tokens:,}",
        "target tok/s": f"{tokens / busy:,.0f}",
        "sent/s": f"{sentences / busy:,.0f}",
        "step ms": f"{1000 * busy / updates:.1f}",
        "peak GiB": memory,
        "TFLOP/s": f"{rate / 1e12:.3g}",
        "MFU": f"{rate / peak:.1%}" if peak else "",
        "MFU sheet": f"{rate / spec:.1%}" if spec else "",
        "note": f"data {drawing / busy:.0%}, pad {1 - real / padded:.0%}, {updates} updates, "
        f"warm-up {warmup:.0f} s"
        + (f", {graphs} graphs, {recompiled} more while timed" if mode == "compile" else "")
        + f", cell {time.perf_counter() - cell_start:.0f} s",
    }


def decode_sources(path: str | None, *, vocab: int, max_positions: int, n: int) -> list[list[int]]:
    """newstest2014's sources, each word a random id (crc32), + EOS; or ``n`` random-length ones."""
    if path:
        lines = [clean_line(s) for s in read_lines(path)]
        ids = [[4 + zlib.crc32(w.encode()) % (vocab - 4) for w in s.split()] for s in lines if s]
    else:
        lengths, _ = synthetic_lengths(n, seed=7)
        ids = [[4 + (i * 7919 + j) % (vocab - 4) for j in range(k)] for i, k in enumerate(lengths.tolist())]
    return [add_eos(x, max_positions)[0] for x in ids]


def decode_row(
    model,
    sources: list[list[int]],
    *,
    label: str,
    beam: int,
    batch: int,
    device: torch.device,
    dtype,
    seconds: float | None,
    fixed_len: int | None,
    translator: Translator | None = None,
    refs: list[str] | None = None,
) -> dict:
    """Search sources in chunks of 4 batches until ``seconds`` have passed (None: all of them)."""
    cell_start = time.perf_counter()
    reset_memory(device)
    length = dict(max_len_a=0.0, max_len_b=fixed_len, min_len=fixed_len) if fixed_len else {}
    searcher = BatchedSearch(SearchOptions(beam=beam, **length), device=device, dtype=dtype)

    def search(chunk):
        return searcher.sources(model, chunk, batch_tokens=10**9, max_sentences=batch)

    search(sources[:batch])  # warm-up: allocations, kernels for this batch size
    sync(device)
    hyps, busy, start = [], 0.0, 0
    while start < len(sources) and (seconds is None or busy < seconds):
        chunk = sources[start : start + 4 * batch]
        t0 = time.perf_counter()
        hyps += search(chunk)
        sync(device)
        busy += time.perf_counter() - t0
        start += len(chunk)
    tokens = sum(len(h[0].tokens) + 1 for h in hyps)
    bleu = ""
    if refs is not None and translator is not None:
        from nmt.metrics import corpus_scores

        bleu = (
            f"{corpus_scores([translator.decode(h[0].tokens) for h in hyps], [refs[: len(hyps)]]).bleu:.2f}"
        )
    batches = math.ceil(len(hyps) / batch)
    return {
        "task": "decode",
        "model": label,
        "precision": "bf16" if dtype == torch.bfloat16 else "fp32",
        "mode": "greedy" if beam == 1 else f"beam {beam}",
        "batch": f"{batch} sent",
        "target tok/s": f"{tokens / busy:,.0f}",
        "sent/s": f"{len(hyps) / busy:,.1f}",
        "step ms": f"{1000 * busy / batches:.1f}",
        "peak GiB": peak_memory(device),
        "BLEU": bleu,
        "note": f"{len(hyps)} sentences{f', output length {fixed_len}' if fixed_len else ''}, "
        f"cell {time.perf_counter() - cell_start:.0f} s",
    }


def profile(step, *, device: torch.device, path: Path, title: str) -> str:
    """Run ``step`` once under torch.profiler; write its operators, most device (CPU: CPU) time
    first, to ``path``; return a line with the wall time and the share the GPU was busy."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    cuda = device.type == "cuda"
    sync(device)
    start = time.perf_counter()
    with profiler(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        step()
        sync(device)
    wall = time.perf_counter() - start
    events = prof.key_averages()
    sort = "self_device_time_total" if cuda else "self_cpu_time_total"
    busy = sum(getattr(e, sort, 0.0) for e in events) / 1e6 if cuda else 0.0  # microseconds -> s
    path.write_text(
        f"{title}\nwall {wall * 1000:.1f} ms under the profiler\n\n"
        + events.table(sort_by=sort, row_limit=40)
        + "\n"
    )
    return (
        f"profile: {title}: wall {wall * 1000:.1f} ms"
        + (f", GPU busy {busy / wall:.0%}" if cuda else "")
        + f" -> {path}"
    )


def profile_steps(
    *, sizes: Sizes, data: Path, meta: dict, work: Path, device: torch.device, out: Path
) -> list[str]:
    """One `base` bf16 update (eager) and one beam-4 batch of `base` (random weights, 30 pieces)."""
    out.mkdir(parents=True, exist_ok=True)
    cfg = sizes.models["base"]
    trainer = new_trainer(
        cfg,
        data,
        meta,
        work,
        device=device,
        precision="bf16",
        max_tokens=sizes.max_tokens,
        update_tokens=sizes.update_tokens,
    )
    stream = trainer.data.micro_batches(trainer.cfg)
    for _ in range(2):
        one_update(trainer, stream)
    lines = [
        profile(
            lambda: one_update(trainer, stream),
            device=device,
            path=out / "profile_train.txt",
            title=f"one base bf16 update ({trainer.accum} micro-batches of <= {sizes.max_tokens} tokens)",
        )
    ]
    trainer = stream = None  # free the model and its batches before decoding
    reset_memory(device)
    torch.manual_seed(0)
    model = Transformer(cfg).to(device).eval()
    batch = sizes.decode_batches[len(sizes.decode_batches) // 2]
    sources = decode_sources(None, vocab=cfg.src_vocab_size, max_positions=cfg.max_positions, n=batch)
    dtype = torch.bfloat16 if device.type == "cuda" else None

    def search():
        options = SearchOptions(beam=4, max_len_a=0.0, max_len_b=30, min_len=30)
        BatchedSearch(options, device=device, dtype=dtype).sources(
            model, sources, batch_tokens=10**9, max_sentences=batch
        )

    search()
    lines.append(
        profile(
            search,
            device=device,
            path=out / "profile_decode.txt",
            title=f"one beam-4 batch of {batch} sentences, base (random weights), 30 pieces",
        )
    )
    return lines


# ----------------------------------------------------------------------------- the table
def table_line(row: dict) -> str:
    return "| " + " | ".join(str(row.get(c, "")) for c in COLUMNS) + " |"


def row_label(kind: str, what: tuple, *, device: torch.device, checkpoint: str | None) -> dict:
    """The columns that name a planned row (all a skipped row shows)."""
    if kind == "peak":
        return {"task": "peak", "precision": precision_label(what[0], device)}
    if kind == "train":
        return {
            "task": "train",
            "model": what[0],
            "precision": precision_label(what[1], device),
            "mode": what[2],
        }
    return {
        "task": "decode",
        "model": "base (random)" if kind == "decode" else Path(checkpoint).name,
        "mode": "greedy" if what[0] == 1 else f"beam {what[0]}",
        "batch": f"{what[1]} sent",
    }


def describe_device(device: torch.device) -> str:
    if device.type != "cuda":
        return f"CPU ({torch.get_num_threads()} threads), torch {torch.__version__}"
    props = torch.cuda.get_device_properties(device)
    try:
        driver = (
            subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            .stdout.strip()
            .splitlines()[0]
        )
    except (OSError, subprocess.SubprocessError, IndexError):
        driver = "?"
    return (
        f"{props.name} ({props.total_memory / 2**30:.0f} GiB, {props.multi_processor_count} SMs), driver "
        f"{driver}, CUDA {torch.version.cuda}, torch {torch.__version__}"
    )


def datasheet(device: torch.device) -> tuple[float, float] | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in DATASHEET.items() if k in name), None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=None, help="cuda (default where available) or cpu")
    p.add_argument("--tiny", action="store_true", help="tiny models and sizes (the default without CUDA)")
    p.add_argument("--budget", type=float, default=None, help="seconds for all rows (GPU 450, tiny 60)")
    p.add_argument("--models", default="base,big")
    p.add_argument("--precisions", default="bf16,tf32")
    p.add_argument("--modes", default="eager,compile")
    p.add_argument("--max-tokens", type=int, default=None, help="first micro-batch budget (GPU 25000)")
    p.add_argument("--beams", default="4,1")
    p.add_argument("--decode-batches", default=None, help="sentences per batch, e.g. 512,128,32 (GPU)")
    p.add_argument(
        "--src-file",
        default=None,
        help="sources for the random-weight decoding rows (default: newstest2014 English under "
        "$NMT_DATA_DIR or ../shared/data, else random lengths)",
    )
    p.add_argument("--checkpoint", help="a trained model for the BLEU rows (e.g. the Multi30k recipe's)")
    p.add_argument("--test-src", help="its test sources (e.g. multi30k/test.en.gz: test2016)")
    p.add_argument("--test-ref", help="its test references")
    p.add_argument(
        "--compile-backend",
        default=None,
        help="torch.compile's backend (default: inductor on a GPU; tiny: eager, i.e. Dynamo's capture "
        "alone, seconds instead of a minute on 2 cores; aot_eager adds AOTAutograd)",
    )
    p.add_argument(
        "--profile",
        metavar="DIR",
        default=None,
        help="after the table, if the budget allows: profile one base bf16 update and one beam-4 "
        "batch into DIR/profile_train.txt and DIR/profile_decode.txt",
    )
    p.add_argument(
        "--sdpa-backends",
        choices=["nmt", "torch"],
        default="nmt",
        help="attention kernels on CUDA: nmt's (nmt.attention.CUDA_SDPA_BACKENDS: flash, memory-efficient, "
        "math) or torch's own choice (cuDNN's included where torch prefers it)",
    )
    p.add_argument("--work", default=None, help="scratch folder (default: a temporary one, removed)")
    args = p.parse_args(argv)
    if args.sdpa_backends == "torch":
        nmt_attention.CUDA_SDPA_BACKENDS = None
    if args.checkpoint and not (args.test_src and args.test_ref):
        p.error("--checkpoint needs --test-src and --test-ref")

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: CUDA is not available here")
    tiny_run = args.tiny or device.type != "cuda"
    sizes = tiny_sizes() if tiny_run else gpu_sizes()
    sizes.budget = sizes.budget if args.budget is None else args.budget
    sizes.max_tokens = args.max_tokens or sizes.max_tokens
    sizes.backend = args.compile_backend or sizes.backend
    if args.decode_batches:
        sizes.decode_batches = tuple(int(b) for b in args.decode_batches.split(","))
    src_file = args.src_file
    if src_file is None:
        data_dir = Path(
            os.environ.get("NMT_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data")
        )
        default = data_dir / "wmt14_en_de" / "test.en.gz"
        src_file = str(default) if default.is_file() else None
    began = time.perf_counter()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="nmt-gpu-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        return run(args, sizes, device, work, src_file, began, tiny_run)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


def run(
    args, sizes: Sizes, device: torch.device, work: Path, src_file: str | None, began: float, tiny_run: bool
) -> int:
    models = {m: sizes.models[m] for m in args.models.split(",") if m}
    precisions = [x for x in args.precisions.split(",") if x]
    modes = [x for x in args.modes.split(",") if x]
    beams = [int(b) for b in args.beams.split(",") if b]
    est = dict(sizes.estimate)
    sheet = datasheet(device)
    # the rows, most wanted first: (kind, arguments)
    plan: list[tuple[str, tuple]] = [("peak", (x,)) for x in precisions]
    train = [(m, x, mode) for mode in modes for x in precisions for m in models]
    first = [r for r in train if r[1] == "bf16" and r[2] == "eager"]
    plan += [("train", r) for r in first]
    plan += (
        [("decode", (beam, batch)) for beam in beams for batch in sizes.decode_batches]
        if "base" in models
        else []
    )
    second = [r for r in train if r[1] == "bf16" and r not in first]
    plan += [("train", r) for r in second]
    plan += (
        [("bleu", (beam, batch)) for beam in beams for batch in sizes.decode_batches]
        if args.checkpoint
        else []
    )
    plan += [("train", r) for r in train if r not in first and r not in second]

    def estimate(kind: str, what: tuple) -> float:
        if kind == "train":
            return est[what[0]] + (est["compile"] if what[2] == "compile" else 0.0)
        return est[kind]

    total = sum(estimate(k, w) for k, w in plan)
    print("# nmt GPU benchmark (benchmarks/gpu.py)")
    print(f"device: {describe_device(device)}{'; tiny sizes' if tiny_run else ''}")
    prov = provenance("gpu")
    print(f"commit: {prov['commit']}, {prov['date']}; command: {prov['command']}")
    kernels = ", ".join(b.name.lower() for b in nmt_attention.CUDA_SDPA_BACKENDS or []) or "any"
    print(f"attention on CUDA: {args.sdpa_backends}'s SDPA kernels ({kernels})")
    print(
        f"plan: {len(plan)} rows, estimated {total:.0f} s for a budget of {sizes.budget:.0f} s "
        f"(rows that no longer fit are skipped); train: ~{sizes.update_tokens:,} target tokens per update, "
        f"{sizes.train_seconds:g} s timed per row after {sizes.warmup} warm-up updates"
    )
    print(
        "FLOPs: forward_flops() in benchmarks/gpu.py: matrix products of real tokens (attention squares "
        "included), x 3 per update; MFU = model FLOP/s / the peak measured below"
    )
    for name, cfg in models.items():
        with torch.device("meta"):  # shapes only: no memory, no initialisation
            n = sum(p.numel() for p in Transformer(cfg).parameters())
        print(
            f"{name}: {n / 1e6:.1f}M parameters; {forward_flops(cfg, 25, 25) * 3 / 25 / 1e9:.3f} "
            "GFLOP per target "
            f"token of a 25/25 pair (6 x parameters: {6 * n / 1e9:.3f})"
        )
    print()
    print(table_line({c: c for c in COLUMNS}))
    print("|" + "---|" * len(COLUMNS), flush=True)

    data = work / "data"
    meta = None
    peaks: dict[str, float] = {}
    decode_model = decode_src = translator = test = refs = None
    for kind, what in plan:
        left = sizes.budget - (time.perf_counter() - began)
        need = estimate(kind, what)
        label = row_label(kind, what, device=device, checkpoint=args.checkpoint)
        if need > left:
            note = f"skipped: ~{need:.0f} s needed, {max(left, 0):.0f} s left"
            print(table_line({**label, "note": note}), flush=True)
            continue
        start = time.perf_counter()
        if kind == "peak":
            set_tf32(what[0] == "tf32")
            dtype = torch.bfloat16 if what[0] == "bf16" else torch.float32
            peaks[what[0]] = matmul_peak(
                device, dtype, sizes.matmul, seconds=1.0 if device.type == "cuda" else 0.2
            )
            spec = sheet[0 if what[0] == "bf16" else 1] if sheet else None
            row = {
                **label,
                "model": f"matmul {sizes.matmul}^3",
                "TFLOP/s": f"{peaks[what[0]] / 1e12:.3g}",
                "MFU sheet": f"{peaks[what[0]] / 1e12 / spec:.1%}" if spec else "",
                "note": f"{'TF32 allowed' if what[0] == 'tf32' else 'bf16'}"
                f"{f'; datasheet {spec:g}' if spec else ''}",
            }
        elif kind == "train":
            if meta is None:
                vocab = next(iter(sizes.models.values())).tgt_vocab_size
                meta = write_synthetic_data(data, vocab=vocab, pairs=sizes.pairs)
            name, precision, mode = what
            decode_model = translator = None  # the GPU's memory to the training row alone
            row = train_row(
                name,
                models[name],
                precision,
                mode,
                sizes=sizes,
                data=data,
                meta=meta,
                work=work,
                device=device,
                peaks=peaks,
                sheet=sheet,
            )
            cell = time.perf_counter() - start
            if mode == "eager":
                est[name] = max(est[name] * 0.5, cell)
            else:
                est["compile"] = max(est["compile"] * 0.5, cell - est[name])
        elif kind == "decode":
            if decode_model is None:
                torch.manual_seed(0)
                cfg = sizes.models["base"]
                decode_model = Transformer(cfg).to(device).eval()
                decode_src = decode_sources(
                    src_file,
                    vocab=cfg.src_vocab_size,
                    max_positions=cfg.max_positions,
                    n=sizes.random_sources,
                )
            row = decode_row(
                decode_model,
                decode_src,
                label="base (random)",
                beam=what[0],
                batch=what[1],
                device=device,
                dtype=torch.bfloat16 if device.type == "cuda" else None,
                seconds=sizes.decode_seconds,
                fixed_len=30,
            )
            est["decode"] = max(est["decode"] * 0.5, time.perf_counter() - start)
        else:  # bleu
            if translator is None:
                decode_model = None
                translator = Translator.load(args.checkpoint, device=str(device))
                lines = [clean_line(s) for s in read_lines(args.test_src)][: sizes.test_limit]
                refs = [clean_line(s) for s in read_lines(args.test_ref)][: len(lines)]
                test, _ = translator.encode(lines)
            row = decode_row(
                translator.model,
                test,
                label=Path(args.checkpoint).name,
                beam=what[0],
                batch=what[1],
                device=translator.device,
                dtype=translator.dtype,
                seconds=None,
                fixed_len=None,
                translator=translator,
                refs=refs,
            )
            est["bleu"] = max(est["bleu"] * 0.5, time.perf_counter() - start)
        set_tf32(False)
        print(table_line(row), flush=True)
    print()
    if args.profile:
        left = sizes.budget - (time.perf_counter() - began)
        if left < est["profile"]:
            print(f"profile: skipped (~{est['profile']:.0f} s needed, {max(left, 0):.0f} s left)")
        else:
            if meta is None:
                meta = write_synthetic_data(
                    data, vocab=sizes.models["base"].tgt_vocab_size, pairs=sizes.pairs
                )
            decode_model = translator = None
            set_tf32(False)
            print(
                "\n".join(
                    profile_steps(
                        sizes=sizes, data=data, meta=meta, work=work, device=device, out=Path(args.profile)
                    )
                )
            )
    print(f"{time.perf_counter() - began:.0f} s in all (budget {sizes.budget:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
