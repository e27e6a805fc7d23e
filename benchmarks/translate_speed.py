"""Decoding speed: sentences/s and target tokens/s for beam 4 and greedy, batch 32 and 1, float32
and bf16 autocast, with the cached decoder and (--naive) a decoder re-running the whole prefix.

    # a trained checkpoint on the Multi30k test set (add --ref-file for BLEU of each setting)
    python benchmarks/translate_speed.py --checkpoint runs/m30k --src-file ../shared/data/multi30k/test.en.gz \
        --ref-file ../shared/data/multi30k/test.de.gz
    # the paper's base model with random weights on newstest2014 sources, output length fixed
    python benchmarks/translate_speed.py --preset base --vocab 37000 \
        --src-file ../shared/data/wmt14_en_de/test.en.gz --fixed-len 30 --limit 32 --naive

Target tokens = generated tokens of the best hypothesis including EOS. With --fixed-len N every
output has exactly N tokens (EOS masked before step N, forced at N). Without a checkpoint the
source text is mapped to random ids one per word (the speed depends only on the lengths).
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt.config import preset  # noqa: E402
from nmt.data.prepare import clean_line, read_lines  # noqa: E402
from nmt.model import Transformer  # noqa: E402
from nmt.infer.search import RecomputePrefix  # noqa: E402
from nmt.infer.translate import Translator, add_eos, search_sources  # noqa: E402


def load(args):
    """(model, sources as ids with EOS, translator or None)."""
    lines = [clean_line(s) for s in read_lines(args.src_file)][: args.limit]
    if args.checkpoint:
        t = Translator.load(args.checkpoint, device="cpu", precision="fp32")
        sources, _ = t.encode(lines)
        return t.model, sources, t
    torch.manual_seed(0)
    model = Transformer(preset(args.preset, args.vocab)).eval()
    sources = [add_eos([4 + zlib.crc32(w.encode()) % (args.vocab - 4) for w in s.split()],
                       model.cfg.max_positions)[0] if s else [] for s in lines]
    return model, sources, None


def run(model, sources, *, beam, batch, dtype, fixed_len, alpha):
    length = dict(max_len_a=0.0, max_len_b=fixed_len, min_len=fixed_len) if fixed_len else {}
    start = time.perf_counter()
    hyps = search_sources(model, sources, beam=beam, alpha=alpha if beam > 1 else 0.0,
                          batch_tokens=10**9, max_sentences=batch, dtype=dtype, **length)
    seconds = time.perf_counter() - start
    return hyps, seconds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", help="trained checkpoint (else --preset with random weights)")
    p.add_argument("--preset", default="tiny")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--src-file", required=True)
    p.add_argument("--ref-file", help="references: add sacreBLEU of each setting (checkpoint only)")
    p.add_argument("--limit", type=int, default=None, help="first N sentences")
    p.add_argument("--fixed-len", type=int, default=0, help="force N output tokens (no early EOS)")
    p.add_argument("--beams", default="4,1")
    p.add_argument("--batches", default="32,1")
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--naive", action="store_true", help="also time the prefix-recomputing decoder (fp32)")
    p.add_argument("--alpha", type=float, default=0.6)
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (1 gives stable numbers on a shared, loaded machine)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    model, sources, translator = load(args)
    refs = [clean_line(s) for s in read_lines(args.ref_file)][: len(sources)] if args.ref_file else None
    n_sent = sum(1 for s in sources if s)
    cfg = model.cfg
    print(f"model: {args.checkpoint or args.preset} (N={cfg.n_layers}, d_model={cfg.d_model}, "
          f"vocab={cfg.tgt_vocab_size}); {n_sent} sentences, {sum(map(len, sources))} source tokens; "
          f"{torch.get_num_threads()} threads; fixed length: {args.fixed_len or 'no'}")
    run(model, sources[:2], beam=2, batch=2, dtype=None, fixed_len=3, alpha=0.6)  # warm-up
    header = f"{'decoder':8s} {'beam':>4s} {'batch':>5s} {'prec':>5s} {'sent/s':>8s} {'tok/s':>8s} {'sec':>7s}"
    print(header + ("  BLEU" if refs else ""))
    cached_speed, fp32_out = {}, {}
    settings = [(m, b, n, pr) for m in (("cached", "naive") if args.naive else ("cached",))
                for b in map(int, args.beams.split(",")) for n in map(int, args.batches.split(","))
                for pr in args.precisions.split(",") if m == "cached" or pr == "fp32"]
    for mode, beam, batch, prec in settings:
        dtype = torch.bfloat16 if prec == "bf16" else None
        decoder = model if mode == "cached" else RecomputePrefix(model)
        hyps, sec = run(decoder, sources, beam=beam, batch=batch, dtype=dtype, fixed_len=args.fixed_len,
                        alpha=args.alpha)
        tokens = sum(len(h[0].tokens) + 1 for h, s in zip(hyps, sources) if s)
        line = f"{mode:8s} {beam:4d} {batch:5d} {prec:>5s} {n_sent / sec:8.2f} {tokens / sec:8.1f} {sec:7.2f}"
        if mode == "cached":
            cached_speed[(beam, batch, prec)] = sec
            if prec == "fp32":
                fp32_out[(beam, batch)] = hyps
            elif (beam, batch) in fp32_out:  # how often reduced precision changes the output
                same = sum(a[0].tokens == b[0].tokens for a, b in zip(hyps, fp32_out[(beam, batch)]))
                line += f"  (output = fp32 for {100 * same / len(hyps):.0f}%)"
        elif (beam, batch, "fp32") in cached_speed:
            line += f"  (cached is {sec / cached_speed[(beam, batch, 'fp32')]:.1f}x faster)"
        if refs is not None and translator is not None:
            from nmt.metrics import corpus_scores

            out = [translator.decode(h[0].tokens) if s else "" for h, s in zip(hyps, sources)]
            line += f"  {corpus_scores(out, [refs]).bleu:5.2f}"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
