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

Both engines do the same work, timed as benchmarks/decode_timing.py says: the same token ids (the
source text encoded once, outside the timing), the same length-sorted batches (``--batch-tokens``
padded source tokens, as `nmt translate`), beam, length penalty (greedy: none), length limit and
number of threads; each row after the same search untimed; each engine in a fresh process of its own
(CTranslate2's OpenMP calls share torch's libgomp: once CTranslate2 has searched in a process, torch's
threads no longer spin between a step's operators, so nmt timed there is not nmt as a user runs
it), the rounds alternating which engine goes first; each row the fastest of ``--repeat`` rounds.
nmt is loaded as `nmt translate` loads it (``Translator.load``: float32 linear layers packed for
oneDNN; int8 = ``precision="int8"``, dynamic int8 linear layers; a row says "unavailable" where this
nmt does not offer it). CTranslate2 int8 loads the float32 export with ``compute_type="int8"``.
Target tokens = generated tokens of the best hypothesis including EOS. Without a checkpoint the
source text is mapped to random ids, one per word (speed depends only on the lengths) and --fixed-len
is required. "stopping": nmt's beam search early termination (``--stopping``: exact, the paper's,
stops when no active hypothesis can still win; fast, CTranslate2's rule, stops when the best
extension is EOS or beam hypotheses have finished); CTranslate2 always uses its own; both of nmt's
rules run by default. Columns: "x nmt fp32" = speed relative to nmt float32 (exact) at the same
beam; "vs CT2" (nmt rows) = nmt's speed over CTranslate2's at the same precision and beam; "= nmt
fp32" / "= CT2" = share of outputs identical to nmt float32 (exact) / to CTranslate2 at the same
precision. ``--json FILE`` also writes the table with its command, CPU, torch, commit and date
(machine.write_table), as results/speed/ keeps them.

With ``--shortlist FILE`` (or ``--synthetic-shortlist`` for random weights) every configuration also
runs with the shortlist (column "shortlist": yes): nmt searches each batch over the shortlist's
union (nmt.infer.shortlist's scope "batch", not nmt's default "sentence"), CTranslate2 over the same
union through the same shortlist exported as its vocabulary map (vmap.txt, ``use_vmap=True``). Then
"vs CT2" is always against CTranslate2 without the map at the same precision and beam, and "vs CT2
vmap" against CTranslate2 with it; "= CT2" compares with CTranslate2 on the same vocabulary (with
the map or without). The header line gives the mean union size per batch.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import zlib
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decode_timing import Rows, Search, Work, measure  # noqa: E402
from machine import cpu_name, public_command, write_table  # noqa: E402

from nmt.checkpoint import resolve_checkpoint, save  # noqa: E402
from nmt.config import apply_overrides, preset  # noqa: E402
from nmt.data.lines import clean_line, read_lines  # noqa: E402
from nmt.export.ctranslate2 import export_model, vocabulary  # noqa: E402
from nmt.infer.shortlist import SPECIAL, Shortlist  # noqa: E402
from nmt.infer.shortlist import load as load_shortlist
from nmt.infer.translate import Translator, add_eos  # noqa: E402
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


def synthetic_shortlist(vocab: int, best: int, frequent: int, scope: str = "sentence") -> Shortlist:
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
        vocab, list(range(len(SPECIAL), first)), candidates, info={"statistic": "synthetic zipf"}, scope=scope
    )


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
        "--warmup", type=int, default=0, help="sentences searched before each timed search (0: all)"
    )
    p.add_argument("--json", help="also write the table, its command and machine here (machine.write_table)")
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
        # checked against the model's vocabulary; the scope "batch": the union CTranslate2's map searches
        base.use_shortlist(load_shortlist(args.shortlist), scope="batch")
        shortlist, base.shortlist = base.shortlist, None  # the rows give it to BatchedSearch themselves
    elif args.synthetic_shortlist:
        best, _, frequent = args.synthetic_shortlist.partition(",")
        shortlist = synthetic_shortlist(cfg.tgt_vocab_size, int(best), int(frequent or 100), scope="batch")
    ct2_dir = export_model(base.model, vocab, tmp / "ct2", source=str(ckpt), shortlist=shortlist)
    n_sent = sum(1 for s in sources if s)
    threads = torch.get_num_threads()
    print(
        f"model: {args.checkpoint or args.preset + ' (random weights)'} ({cfg.depth()}, "
        f"d_model={cfg.d_model}, "
        f"vocab={cfg.tgt_vocab_size}); {n_sent} sentences, {sum(map(len, sources))} source tokens; "
        f"{threads} threads; --batch-tokens {args.batch_tokens}; fixed length: {args.fixed_len or 'no'}"
    )
    listing = None
    if shortlist is not None:
        from nmt.data.batching import make_batches

        todo = [s for s in sources if s]
        unions = [
            shortlist.rows(
                torch.tensor([todo[j] + [0] * (max(len(todo[i]) for i in b) - len(todo[j])) for j in b])
            ).numel()
            for b in make_batches([len(s) for s in todo], batch_tokens=args.batch_tokens)
        ]
        listing = (
            f"shortlist: {args.shortlist or 'synthetic ' + args.synthetic_shortlist} "
            f"({shortlist.info.get('statistic', '?')}); union per batch: mean "
            f"{sum(unions) / len(unions):.0f}, "
            f"min {min(unions)}, max {max(unions)} of {cfg.tgt_vocab_size} target pieces "
            f"({len(unions)} batches)"
        )
        print(listing)
    work = Work(
        batch_tokens=args.batch_tokens,
        alpha=args.alpha,
        threads=threads,
        warmup=args.warmup,
        **(dict(max_len_a=0.0, max_len_b=args.fixed_len, min_len=args.fixed_len) if args.fixed_len else {}),
    )
    rows = table_rows(args, shortlist is not None)
    groups, where = engine_groups(rows, sources, shortlist, ckpt=str(ckpt), ct2_dir=str(ct2_dir))
    timed = measure(groups, work, args.repeat, log=lambda m: print(m, file=sys.stderr, flush=True))
    rows = [(*row, timed[where[row]]) for row in rows]
    columns, cells = table(rows, sources, refs=refs if args.checkpoint else None, decode=base.decode)
    print("\n| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for line in cells:
        print("| " + " | ".join(line) + " |")
    if args.json:
        write_table(
            args.json,
            "translate_speed",
            what=f"nmt against CTranslate2 4.8.5 decoding {n_sent} sentences of "
            f"{args.src_file.rsplit('/', 1)[-1]}",
            model=f"{args.checkpoint or args.preset + ' (random weights)'} ({cfg.depth()}, d_model "
            f"{cfg.d_model}, vocabulary {cfg.tgt_vocab_size})",
            cpu=cpu_name(),
            timing=f"search only (token ids in and out), each engine in its own process "
            f"(benchmarks/decode_timing.py), each row after the same search untimed, the fastest of "
            f"{args.repeat} rounds; --batch-tokens {args.batch_tokens}"
            + (
                f"; every output {args.fixed_len} tokens (--fixed-len), so both engines run the same "
                "steps whatever their stopping rule"
                if args.fixed_len
                else ""
            ),
            **({} if listing is None else {"shortlist": public_command(listing)}),
            columns=columns,
            rows=cells,
        )
    return 0


def table_rows(args, listed: bool) -> list[tuple]:
    """The table's rows in order, (engine, precision, beam, stopping, listed): per beam and
    precision (and without, then with the shortlist) CTranslate2, then nmt with each stopping rule
    (greedy: one row)."""
    rows = []
    for beam in map(int, args.beams.split(",")):
        for prec in args.precisions.split(","):
            for sl in [False, True] if listed else [False]:
                rows.append(("ct2", prec, beam, "fast", sl))
                rows += [
                    ("nmt", prec, beam, s, sl) for s in (args.stopping.split(",") if beam > 1 else ["exact"])
                ]
    return rows


def engine_groups(rows: list[tuple], sources, shortlist, *, ckpt: str, ct2_dir: str):
    """decode_timing's groups for ``rows`` (one Rows per engine and precision, its searches in table
    order) and where each row's result is: {row: (engine, i, j)}."""
    searches: dict[tuple, list[Search]] = {}  # (engine, precision) -> its searches, in table order
    where = {}
    for row in rows:
        name, prec, beam, stop, listed = row
        found = searches.setdefault((name, prec), [])
        where[row] = (name, [k for k in searches if k[0] == name].index((name, prec)), len(found))
        found.append(Search(beam, stop, listed))
    groups: dict[str, list[Rows]] = {"nmt": [], "ct2": []}
    for (name, prec), found in searches.items():
        path, listing = (ckpt, shortlist) if name == "nmt" else (ct2_dir, None)
        groups[name].append(Rows(name, prec, (path,), sources, tuple(found), listing))
    return groups, where


def table(rows: list[tuple], sources, *, refs, decode) -> tuple[list[str], list[list[str]]]:
    """The printed table: its columns and each row's cells (decode_timing's Timed per row, or the
    reason it has none); BLEU when ``refs`` are given."""
    listed = any(r[4] for r in rows)
    columns = ["decoder", "precision", "beam", "stopping", "shortlist", "sent/s", "tok/s", "sec"]
    columns += ["x nmt fp32", "vs CT2"] + (["vs CT2 vmap"] if listed else []) + ["= nmt fp32", "= CT2"]
    columns += ["BLEU"] if refs else []
    done = {r[:5]: r[5] for r in rows if not isinstance(r[5], str)}
    n_sent = sum(1 for s in sources if s)
    out = []
    for name, prec, beam, stop, sl, result in rows:
        head = [
            "nmt" if name == "nmt" else "CTranslate2 4.8.5",
            prec,
            str(beam),
            stop if name == "nmt" and beam > 1 else ("CTranslate2's" if beam > 1 else ""),
            ("yes (vmap)" if name == "ct2" else "yes") if sl else "no",
        ]
        if isinstance(result, str):
            out.append(head + [result] + [""] * (len(columns) - len(head) - 1))
            continue
        sec, ids = result.seconds, result.ids
        ref = done.get(("nmt", "fp32", beam, "exact", False))
        ct2 = done.get(("ct2", prec, beam, "fast", False))
        ct2_vmap = done.get(("ct2", prec, beam, "fast", True))
        same_ct2 = done.get(("ct2", prec, beam, "fast", sl))

        def ratio(other):
            return f"{other.seconds / sec:.2f}" if other and name == "nmt" else ""

        def same(other):
            return f"{100 * sum(a == b for a, b in zip(ids, other.ids)) / len(ids):.1f}%" if other else ""

        tokens = sum(len(h) + 1 for h, s in zip(ids, sources) if s)
        line = head + [f"{n_sent / sec:.1f}", f"{tokens / sec:.0f}", f"{sec:.2f}"]
        line += [f"{ref.seconds / sec:.2f}" if ref else "", ratio(ct2)]
        line += [ratio(ct2_vmap)] if listed else []
        line += [same(ref), same(same_ct2) if name == "nmt" else ""]
        if refs:
            from nmt.metrics import corpus_scores

            hyp = [decode(h) if s else "" for h, s in zip(ids, sources)]
            line.append(f"{corpus_scores(hyp, [refs]).bleu:.2f}")
        out.append(line)
    return columns, out


if __name__ == "__main__":
    sys.exit(main())
