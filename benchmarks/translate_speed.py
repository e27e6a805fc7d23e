"""Decoding speed of nmt and CTranslate2 side by side, in one run on the same weights: float32 and
int8, beam 4 and greedy, search time only (token ids in, token ids out), with the ratio to nmt and
BLEU where references exist.

    # a trained checkpoint on the Multi30k test set
    python benchmarks/translate_speed.py --checkpoint runs/demo/average \\
        --src-file ../shared/data/multi30k/test.en.gz --ref-file ../shared/data/multi30k/test.de.gz
    # the paper's base model with random weights on newstest2014 sources, output length fixed at 30
    python benchmarks/translate_speed.py --preset base --vocab 37000 \\
        --src-file ../shared/data/wmt14_en_de/test.en.gz --fixed-len 30 --limit 200
    # with a vocabulary shortlist (nmt shortlist DATA --out FILE): nmt --shortlist, CTranslate2 use_vmap
    python benchmarks/translate_speed.py --checkpoint runs/demo/average --shortlist runs/demo/shortlist.txt \\
        --src-file ../shared/data/multi30k/test.en.gz --ref-file ../shared/data/multi30k/test.de.gz
    # random weights: a synthetic shortlist (synthetic_shortlist) of 20 targets per source id, 100 frequent
    python benchmarks/translate_speed.py --preset base --vocab 37000 --synthetic-shortlist 20,100 \\
        --src-file ../shared/data/wmt14_en_de/test.en.gz --fixed-len 30 --limit 200

Both engines get the same length-sorted batches (``--batch-tokens`` padded source tokens, as
`nmt translate`) and the same number of threads. nmt int8 is ``Translator.load(precision="int8")``
(dynamic int8 linear layers); a row says "unavailable" where this nmt does not offer it. CTranslate2
int8 loads the float32 export with ``compute_type="int8"``. Target tokens = generated tokens of the
best hypothesis including EOS. Without a checkpoint the source text is mapped to random ids, one per
word (speed depends only on the lengths) and --fixed-len is required. "stopping": nmt's beam search early
termination (``--stopping``: exact, the paper's, stops when no active hypothesis can still win;
fast, CTranslate2's rule, stops when the best extension is EOS or beam hypotheses have finished);
CTranslate2 always uses its own. Columns: "x nmt fp32" = speed relative to nmt float32 (exact) at
the same beam; "vs CT2" (nmt rows) = nmt's speed over CTranslate2's at the same precision and
beam; "= nmt fp32" / "= CT2" = share of outputs identical to nmt float32 (exact) / to CTranslate2
at the same precision.

With ``--shortlist FILE`` (or ``--synthetic-shortlist`` for random weights) every configuration also
runs with the shortlist (column "shortlist": yes): nmt searches each batch over the shortlist's
union (nmt.infer.shortlist), CTranslate2 over the same union through the same shortlist exported as
its vocabulary map (vmap.txt, ``use_vmap=True``). Then "vs CT2" is always against CTranslate2
without the map at the same precision and beam, and "vs CT2 vmap" against CTranslate2 with it;
"= CT2" compares with CTranslate2 on the same vocabulary (with the map or without). The header
line gives the mean union size per batch.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
import zlib
from pathlib import Path

import torch

from nmt.infer.options import SearchOptions

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt.checkpoint import resolve_checkpoint, save  # noqa: E402
from nmt.config import apply_overrides, preset  # noqa: E402
from nmt.data.lines import clean_line, read_lines  # noqa: E402
from nmt.export.ctranslate2 import export_model, vocabulary  # noqa: E402
from nmt.infer.engine_ctranslate2 import CTranslate2Translator, load_ctranslate2  # noqa: E402
from nmt.infer.shortlist import SPECIAL, Shortlist  # noqa: E402
from nmt.infer.shortlist import load as load_shortlist
from nmt.infer.translate import BatchedSearch, Translator, add_eos  # noqa: E402
from nmt.model import Transformer  # noqa: E402


def random_checkpoint(args, lines: list[str], tmp: Path) -> Path:
    """A random-weight preset model saved as a checkpoint (with a throwaway 100-piece SentencePiece
    model so that Translator.load accepts it; the benchmark feeds ids, never text)."""
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(tmp / "spm"),
        vocab_size=100,
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        minloglevel=2,
    )
    torch.manual_seed(0)
    cfg = apply_overrides(
        preset(args.preset, args.vocab), dict(kv.split("=", 1) for kv in args.set), section="model"
    )
    return save(
        tmp / "ckpt",
        model=Transformer(cfg).eval(),
        spm_model=tmp / "spm.model",
        config={"model": dataclasses.asdict(cfg), "train": {}, "data": {}},
    )


def synthetic_shortlist(vocab: int, best: int, frequent: int) -> Shortlist:
    """For random weights (ids without meaning): ids 4..4+frequent-1 always scored, and for each
    source id ``best`` target ids drawn (seeded by the id) from a Zipf law over the ids (p(rank r)
    proportional to 1/r, ids in rank order after the frequent ones), as word translations are:
    lists of different sources overlap in the common ids, as a real shortlist's do."""
    import numpy as np

    first = len(SPECIAL) + frequent
    ranks = np.arange(1, vocab - first + 1)
    p = (1.0 / ranks) / (1.0 / ranks).sum()
    candidates = {}
    for s in range(len(SPECIAL), vocab):
        rng = np.random.default_rng(s)
        candidates[s] = sorted(set((first + rng.choice(len(ranks), size=best, p=p)).tolist()))
    return Shortlist(
        vocab, list(range(len(SPECIAL), first)), candidates, info={"statistic": "synthetic zipf"}
    )


def nmt_translator(checkpoint: Path, precision: str):
    try:
        return Translator.load(checkpoint, device="cpu", precision=precision)
    except Exception as e:  # an nmt without int8: the row says so
        return f"unavailable ({type(e).__name__})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", help="trained checkpoint (else --preset with random weights)")
    p.add_argument("--preset", default="base")
    p.add_argument("--vocab", type=int, default=37000)
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a ModelConfig field of the random --preset model, e.g. --set n_decoder_layers=1 (repeatable)",
    )
    p.add_argument("--src-file", required=True)
    p.add_argument("--ref-file", help="references: add sacreBLEU of each row (checkpoint only)")
    p.add_argument("--limit", type=int, default=None, help="first N sentences")
    p.add_argument("--fixed-len", type=int, default=0, help="force N output tokens (no early EOS)")
    p.add_argument("--beams", default="4,1")
    p.add_argument("--precisions", default="fp32,int8")
    p.add_argument(
        "--batch-tokens", type=int, default=2048, help="padded source tokens per batch (both engines)"
    )
    p.add_argument("--alpha", type=float, default=0.6, help="length penalty for beam > 1 (greedy: 0)")
    p.add_argument(
        "--stopping",
        default="exact,fast",
        help="nmt beam search stopping rules to run (exact: the paper's; fast: CTranslate2's)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="time each row this many times (in rounds over all rows), keep the fastest",
    )
    p.add_argument("--threads", type=int, default=None, help="threads for both engines (default: torch's)")
    p.add_argument(
        "--shortlist", default=None, help="also run every row with this shortlist (checkpoint only)"
    )
    p.add_argument(
        "--synthetic-shortlist",
        default=None,
        metavar="BEST,FREQUENT",
        help="random weights: also run every row with a synthetic shortlist (see synthetic_shortlist)",
    )
    args = p.parse_args()
    if args.shortlist and not args.checkpoint:
        p.error("--shortlist belongs to a checkpoint's vocabulary; random weights take --synthetic-shortlist")
    if args.synthetic_shortlist and args.checkpoint:
        p.error("--synthetic-shortlist is for random weights; a checkpoint takes --shortlist FILE")
    if args.set and args.checkpoint:
        p.error("--set changes the random --preset model; a --checkpoint keeps its own configuration")
    bad = [kv for kv in args.set if "=" not in kv]
    if bad:
        p.error(f"--set {bad[0]}: expected FIELD=VALUE, e.g. --set n_decoder_layers=1")
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.checkpoint and not args.fixed_len:
        p.error("random weights (no --checkpoint) need --fixed-len")

    lines = [clean_line(s) for s in read_lines(args.src_file)][: args.limit]
    refs = [clean_line(s) for s in read_lines(args.ref_file)][: len(lines)] if args.ref_file else None
    tmp = Path(tempfile.mkdtemp(prefix="nmt-bench-"))
    ckpt = resolve_checkpoint(args.checkpoint) if args.checkpoint else random_checkpoint(args, lines, tmp)
    base = Translator.load(ckpt, device="cpu", precision="fp32")
    cfg = base.model.cfg
    if args.checkpoint:
        sources, _ = base.encode(lines)
        vocab = vocabulary(base.sp)
    else:
        sources = [
            add_eos([4 + zlib.crc32(w.encode()) % (args.vocab - 4) for w in s.split()], cfg.max_positions)[0]
            if s
            else []
            for s in lines
        ]
        vocab = ["<blank>", "<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(4, cfg.tgt_vocab_size)]
    shortlist = None
    if args.shortlist:
        base.use_shortlist(load_shortlist(args.shortlist))  # checked against the model's vocabulary
        shortlist, base.shortlist = base.shortlist, None  # the rows give it to BatchedSearch themselves
    elif args.synthetic_shortlist:
        best, _, frequent = args.synthetic_shortlist.partition(",")
        shortlist = synthetic_shortlist(cfg.tgt_vocab_size, int(best), int(frequent or 100))
    ct2_dir = export_model(base.model, vocab, tmp / "ct2", source=str(ckpt), shortlist=shortlist)
    n_sent = sum(1 for s in sources if s)
    threads = torch.get_num_threads()
    print(
        f"model: {args.checkpoint or args.preset + ' (random weights)'} ({cfg.depth()}, "
        f"d_model={cfg.d_model}, "
        f"vocab={cfg.tgt_vocab_size}); {n_sent} sentences, {sum(map(len, sources))} source tokens; "
        f"{threads} threads; --batch-tokens {args.batch_tokens}; fixed length: {args.fixed_len or 'no'}"
    )
    if shortlist is not None:
        from nmt.data.batching import make_batches

        todo = [s for s in sources if s]
        unions = [
            shortlist.rows(
                torch.tensor([todo[j] + [0] * (max(len(todo[i]) for i in b) - len(todo[j])) for j in b])
            ).numel()
            for b in make_batches([len(s) for s in todo], batch_tokens=args.batch_tokens)
        ]
        print(
            f"shortlist: {args.shortlist or 'synthetic ' + args.synthetic_shortlist} "
            f"({shortlist.info.get('statistic', '?')}); union per batch: mean "
            f"{sum(unions) / len(unions):.0f}, "
            f"min {min(unions)}, max {max(unions)} of {cfg.tgt_vocab_size} target pieces "
            f"({len(unions)} batches)"
        )
    length = dict(max_len_a=0.0, max_len_b=args.fixed_len, min_len=args.fixed_len) if args.fixed_len else {}

    def run_nmt(t, beam, stopping, listed=False):
        options = SearchOptions(beam=beam, alpha=args.alpha if beam > 1 else 0.0, stopping=stopping, **length)
        search = BatchedSearch(options, dtype=t.dtype, shortlist=shortlist if listed else None)
        hyps = search.sources(t.model, sources, batch_tokens=args.batch_tokens)
        return [h[0].tokens for h in hyps]

    def run_ct2(t, beam, listed=False):
        hyps = t.search_ids(
            sources,
            SearchOptions(beam=beam, alpha=args.alpha if beam > 1 else 0.0, **length),
            batch_tokens=args.batch_tokens,
            use_vmap=listed,
        )
        return [h[0][0] for h in hyps]

    engines = {}
    for prec in args.precisions.split(","):
        engines[("nmt", prec)] = base if prec == "fp32" else nmt_translator(ckpt, prec)
        ct2 = CTranslate2Translator(
            load_ctranslate2(ct2_dir, compute_type={"fp32": "float32"}.get(prec, prec), threads=threads),
            base.sp,
        )
        engines[("ct2", prec)] = ct2

    stoppings = args.stopping.split(",")
    listings = [False, True] if shortlist is not None else [False]
    rows = []  # (name, prec, beam, stopping, listed, result): result = (sec, ids) or an "unavailable" string
    for beam in map(int, args.beams.split(",")):
        for prec in args.precisions.split(","):
            for listed in listings:
                for name, stop in [("ct2", "fast")] + [
                    ("nmt", s) for s in (stoppings if beam > 1 else ["exact"])
                ]:
                    t = engines[(name, prec)]
                    rows.append(
                        (name, prec, beam, stop, listed, t if isinstance(t, str) else (float("inf"), None))
                    )
    timed = [i for i, row in enumerate(rows) if not isinstance(row[-1], str)]
    for i in timed:  # warm-up (first-call allocations, int8 packing)
        name, prec, beam, stop, listed, _ = rows[i]
        t, small = engines[(name, prec)], sources[:4]
        (
            BatchedSearch(
                SearchOptions(beam=beam), dtype=t.dtype, shortlist=shortlist if listed else None
            ).sources(t.model, small, batch_tokens=args.batch_tokens)
            if name == "nmt"
            else t.search_ids(
                small, SearchOptions(beam=beam), batch_tokens=args.batch_tokens, use_vmap=listed
            )
        )
    for r in range(args.repeat):  # every row once per round, the fastest round kept: the machine's
        for i in timed:  # drifts in speed fall on all rows alike, not on the rows timed last
            name, prec, beam, stop, listed, (best, _) = rows[i]
            t = engines[(name, prec)]
            time.sleep(0.2)  # the other engine's OpenMP threads stop spinning before this row starts
            start = time.perf_counter()
            ids = run_nmt(t, beam, stop, listed) if name == "nmt" else run_ct2(t, beam, listed)
            sec = time.perf_counter() - start
            rows[i] = (name, prec, beam, stop, listed, (min(best, sec), ids))
            print(
                f"  round {r + 1}: {name} {prec} beam {beam} {stop if name == 'nmt' else ''}"
                f"{' shortlist' if listed else ''}: {sec:.2f} s (best {min(best, sec):.2f} s)",
                file=sys.stderr,
                flush=True,
            )

    done = {(n, p, b, s, sl): r for n, p, b, s, sl, r in rows if not isinstance(r, str)}
    vmap_col = " vs CT2 vmap |" if shortlist is not None else ""
    print(
        "\n| decoder | precision | beam | stopping | shortlist | sent/s | tok/s | sec | x nmt fp32 | vs CT2 |"
        f"{vmap_col} = nmt fp32 | = CT2 |" + (" BLEU |" if refs else "")
    )
    print(
        "|---|---|---|---|---|---|---|---|---|---|---|---|"
        + ("---|" if vmap_col else "")
        + ("---|" if refs else "")
    )
    for name, prec, beam, stop, listed, result in rows:
        label = "nmt" if name == "nmt" else "CTranslate2 4.8.5"
        stop_label = stop if name == "nmt" and beam > 1 else ("CTranslate2's" if beam > 1 else "")
        listed_label = ("yes (vmap)" if name == "ct2" else "yes") if listed else "no"
        if isinstance(result, str):
            print(
                f"| {label} | {prec} | {beam} | {stop_label} | {listed_label} | {result} | | | | |"
                + (" |" if vmap_col else "")
                + " | |"
                + (" |" if refs else "")
            )
            continue
        sec, ids = result
        tokens = sum(len(h) + 1 for h, s in zip(ids, sources) if s)
        speed = n_sent / sec
        ref = done.get(("nmt", "fp32", beam, "exact", False))
        ct2 = done.get(("ct2", prec, beam, "fast", False))
        ct2_vmap = done.get(("ct2", prec, beam, "fast", True))
        same_ct2 = done.get(("ct2", prec, beam, "fast", listed))
        rel = f"{ref[0] / sec:.2f}" if ref else ""
        vs = f"{ct2[0] / sec:.2f}" if ct2 and name == "nmt" else ""
        vs_vmap = (f" {ct2_vmap[0] / sec:.2f} |" if ct2_vmap and name == "nmt" else " |") if vmap_col else ""

        def same(other):
            return f"{100 * sum(a == b for a, b in zip(ids, other[1])) / len(ids):.1f}%" if other else ""

        line = (
            f"| {label} | {prec} | {beam} | {stop_label} | {listed_label} | {speed:.1f} | "
            f"{tokens / sec:.0f} | "
            f"{sec:.2f} | {rel} | {vs} |{vs_vmap} {same(ref)} | {same(same_ct2) if name == 'nmt' else ''} |"
        )
        if refs is not None and args.checkpoint:
            from nmt.metrics import corpus_scores

            hyp = [base.decode(h) if s else "" for h, s in zip(ids, sources)]
            line += f" {corpus_scores(hyp, [refs]).bleu:.2f} |"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
