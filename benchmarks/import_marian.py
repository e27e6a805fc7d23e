"""Time and peak memory of `nmt import huggingface` on a MarianMTModel of OPUS-MT's size.

    python benchmarks/import_marian.py [--json results/speed/import-marian.json] [--workdir DIR]

Builds with transformers a random-weight MarianMTModel shaped as Helsinki-NLP/opus-mt-en-de's
config.json (d_model 512, 6 encoder and 6 decoder layers, 8 heads, d_ff 2048, one 58,101-token
vocabulary shared by the encoder, the decoder and the output, swish, static sinusoidal positions,
scale_embedding, 512 positions, eos 0, padding = decoder start = the last id), with a source.spm and a
target.spm (unigram, --spm-vocab pieces each) trained here on generated sentences of two made-up
languages, and OPUS-MT's vocab.json: </s> 0, <unk> 1, the pieces of both models once, filler pieces
that neither model produces up to --vocab - 1 entries (the importer marks them unused; at the
defaults the two models' pieces fill all but about 2,300), <pad> last. It is saved by save_pretrained
(model.safetensors) with its MarianTokenizer.

Then `python -m nmt import huggingface DIR OUT` runs in a child process: its wall time, its peak RSS
(the child's own maximum resident set, os.wait4 in a small launcher process), the size of what it
wrote. As a check, the imported model's greedy output on --check-sentences sentences is compared with
transformers' generate, token for token (EOS forced at --max-len tokens on both sides, the padding
never chosen, as OPUS-MT's configuration says); the script exits 1 where one differs. --workdir
keeps the Marian directory (reused by a later run with the same settings) and the import; without it
both are written to a temporary folder and deleted.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import write_table  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SCRIPT = "import_marian"
ALPHABETS = {"source": "abcdefghijklmnopqrstuvwxyz", "target": "abcdefghiklmnoprstuvwzäöüß"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--vocab", type=int, default=58101, help="vocabulary size (opus-mt-en-de: 58101)")
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--layers", type=int, default=6, help="encoder layers, and decoder layers")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--d-ff", type=int, default=2048)
    p.add_argument("--positions", type=int, default=512, help="max_position_embeddings")
    p.add_argument("--spm-vocab", type=int, default=29000, help="pieces of source.spm and of target.spm")
    p.add_argument("--sentences", type=int, default=100_000, help="generated sentences per language")
    p.add_argument("--check-sentences", type=int, default=5)
    p.add_argument("--max-len", type=int, default=16, help="output tokens of the greedy check (with EOS)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", default=None, help="keep the Marian directory and the import here")
    p.add_argument("--json", default=None, help="write the table and its provenance here")
    return p.parse_args(argv)


def sentences(side: str, n: int, seed: int) -> list[str]:
    """``n`` sentences of 4-30 words drawn (Zipf) from 50,000 made-up words of ``side``'s alphabet."""
    rng = random.Random(f"{seed}/{side}")
    letters = ALPHABETS[side]
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 11))) for _ in range(50_000)]
    cumulative = list(itertools.accumulate(1.0 / (k + 1) for k in range(len(words))))
    return [" ".join(rng.choices(words, cum_weights=cumulative, k=rng.randint(4, 30))) for _ in range(n)]


def train_spm(lines: list[str], vocab_size: int) -> bytes:
    """A unigram SentencePiece model with Marian's ids (unk 0, <s> 1, </s> 2), as bytes."""
    import sentencepiece as spm

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=out,
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        hard_vocab_limit=False,
        num_threads=len(os.sched_getaffinity(0)),
        minloglevel=2,
    )
    return out.getvalue()


def joint_vocab(models: list[bytes], size: int) -> dict[str, int]:
    """OPUS-MT's vocab.json of ``size`` entries: </s> 0, <unk> 1, every piece of the models once,
    filler pieces no model produces, <pad> last."""
    import sentencepiece as spm

    pieces = ["</s>", "<unk>"]
    seen = set(pieces)
    for m in models:
        sp = spm.SentencePieceProcessor(model_proto=m)
        for i in range(sp.get_piece_size()):
            p = sp.id_to_piece(i)
            if not (sp.is_control(i) or sp.is_unknown(i)) and p not in seen:
                pieces.append(p)
                seen.add(p)
    if len(pieces) > size - 1:
        raise SystemExit(f"the models have {len(pieces) - 2} pieces, more than --vocab {size} holds")
    pieces += [f"▁filler{k}" for k in range(size - 1 - len(pieces))]
    return {p: i for i, p in enumerate([*pieces, "<pad>"])}


def marian_config(args: argparse.Namespace):
    """opus-mt-en-de's config.json at the sizes of ``args``."""
    from transformers import MarianConfig

    n = args.vocab
    return MarianConfig(
        vocab_size=n,
        decoder_vocab_size=n,
        d_model=args.d_model,
        encoder_layers=args.layers,
        decoder_layers=args.layers,
        encoder_attention_heads=args.heads,
        decoder_attention_heads=args.heads,
        encoder_ffn_dim=args.d_ff,
        decoder_ffn_dim=args.d_ff,
        max_position_embeddings=args.positions,
        activation_function="swish",
        dropout=0.1,
        attention_dropout=0.0,
        activation_dropout=0.0,
        scale_embedding=True,
        static_position_embeddings=True,
        share_encoder_decoder_embeddings=True,
        pad_token_id=n - 1,
        eos_token_id=0,
        bos_token_id=0,
        decoder_start_token_id=n - 1,
    )


def generation_config(args: argparse.Namespace):
    """opus-mt-en-de's generation settings: EOS forced at the length limit, the padding never chosen."""
    from transformers import GenerationConfig

    n = args.vocab
    return GenerationConfig(
        decoder_start_token_id=n - 1,
        eos_token_id=0,
        pad_token_id=n - 1,
        forced_eos_token_id=0,
        bad_words_ids=[[n - 1]],
        num_beams=4,
        max_length=args.positions,
    )


def settings(args: argparse.Namespace) -> dict:
    """What the Marian directory is built from (a --workdir's is reused when these match)."""
    keys = ("vocab", "d_model", "layers", "heads", "d_ff", "positions", "spm_vocab", "sentences", "seed")
    return {k: getattr(args, k) for k in keys}


def build_marian(folder: Path, args: argparse.Namespace) -> list[str]:
    """save_pretrained of the random MarianMTModel and its MarianTokenizer at ``folder``; returns the
    generated source sentences (the check translates some)."""
    import torch
    from transformers import MarianMTModel, MarianTokenizer

    src, tgt = sentences("source", args.sentences, args.seed), sentences("target", args.sentences, args.seed)
    clock = time.perf_counter()
    models = [train_spm(src, args.spm_vocab), train_spm(tgt, args.spm_vocab)]
    log(f"source.spm and target.spm trained in {time.perf_counter() - clock:.0f}s")
    folder.mkdir(parents=True)
    spm_dir = folder / "_spm"
    spm_dir.mkdir()
    for name, m in zip(("source.spm", "target.spm"), models):
        (spm_dir / name).write_bytes(m)
    (spm_dir / "vocab.json").write_text(json.dumps(joint_vocab(models, args.vocab), ensure_ascii=False))
    torch.manual_seed(args.seed)
    model = MarianMTModel(marian_config(args)).eval()
    model.generation_config = generation_config(args)
    with torch.no_grad():
        model.model.shared.weight[args.vocab - 1] = 0.0  # the padding (decoder start) row, as OPUS-MT's
    model.save_pretrained(folder)
    names = {k: str(spm_dir / f) for k, f in (("source_spm", "source.spm"), ("target_spm", "target.spm"))}
    MarianTokenizer(
        **names, vocab=str(spm_dir / "vocab.json"), source_lang="en", target_lang="de"
    ).save_pretrained(folder)
    shutil.rmtree(spm_dir)
    (folder / "build.json").write_text(json.dumps(settings(args)) + "\n")
    return src


def marian_dir(work: Path, args: argparse.Namespace) -> tuple[Path, list[str]]:
    """The Marian directory of ``args`` in ``work``: the one there when built with the same settings,
    else built anew; and the source sentences it was built from."""
    folder = work / "hf"
    built = folder / "build.json"
    if built.is_file() and json.loads(built.read_text()) == settings(args):
        log(f"reusing {folder}")
        return folder, sentences("source", args.sentences, args.seed)
    shutil.rmtree(folder, ignore_errors=True)
    clock = time.perf_counter()
    src = build_marian(folder, args)
    log(f"MarianMTModel built and saved in {time.perf_counter() - clock:.0f}s")
    return folder, src


# Runs a command with its output in a file and prints its wall seconds, exit status and peak RSS. The
# import is started from this small process, not from the benchmark's: a child's peak RSS on Linux
# includes the memory of the process it was forked from (exec keeps the high-water mark).
LAUNCHER = """
import json, os, subprocess, sys, time
with open(sys.argv[1], "w") as f:
    start = time.perf_counter()
    child = subprocess.Popen(sys.argv[2:], stdout=f, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "status": os.waitstatus_to_exitcode(status), "kib": usage.ru_maxrss}))
"""


def run_import(hf: Path, out: Path) -> dict:
    """`python -m nmt import huggingface HF OUT` in a child process: wall seconds, peak RSS (MiB: the
    child's own maximum resident set), the output's size (MiB). Its output goes to OUT.log."""
    shutil.rmtree(out, ignore_errors=True)
    log_file = out.parent / f"{out.name}.log"
    cmd = [
        sys.executable,
        "-c",
        LAUNCHER,
        str(log_file),
        sys.executable,
        "-m",
        "nmt",
        "import",
        "huggingface",
    ]
    done = subprocess.run([*cmd, str(hf), str(out)], cwd=REPO, check=True, capture_output=True, text=True)
    result = json.loads(done.stdout)
    if result["status"] != 0:
        raise SystemExit(f"nmt import failed ({result['status']}): {log_file.read_text().strip()}")
    size = sum(f.stat().st_size for f in out.iterdir())
    return {"seconds": result["seconds"], "peak_rss_mib": result["kib"] / 1024, "output_mib": size / 2**20}


def greedy_check(hf: Path, out: Path, lines: list[str], max_len: int) -> tuple[int, int]:
    """(sentences whose nmt greedy output equals transformers' generate token for token, sentences);
    sources longer than the model's positions cut alike on both sides (the pieces that fit, then EOS)."""
    import torch
    from transformers import MarianMTModel, MarianTokenizer

    from nmt.infer.translate import Translator

    tok = MarianTokenizer.from_pretrained(hf)
    model = MarianMTModel.from_pretrained(hf).eval()
    cfg = model.config
    with torch.no_grad():
        ids = model.generate(
            **tok(
                lines,
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=cfg.max_position_embeddings,
            ),
            num_beams=1,
            do_sample=False,
            max_new_tokens=max_len,
            forced_eos_token_id=cfg.eos_token_id,
            bad_words_ids=[[cfg.pad_token_id]],
        ).tolist()
    theirs = []
    for row in ids:
        row = row[1 : row.index(cfg.eos_token_id, 1) if cfg.eos_token_id in row[1:] else None]
        theirs.append(tok.convert_ids_to_tokens(row))
    nmt = Translator.load(out, device="cpu", precision="fp32")
    search = dict(beam=1, alpha=0.0, max_len_a=0.0, max_len_b=max_len)
    ours = nmt.translate_nbest(lines, on_truncate=lambda i, n: None, **search)
    ours = [[nmt.sp.id_to_piece(i) for i in r[0].tokens] for r in ours]
    return sum(a == b for a, b in zip(ours, theirs)), len(lines)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nmt-import-bench-") as tmp:
        work = Path(args.workdir) if args.workdir else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        hf, src = marian_dir(work, args)
        weights = (hf / "model.safetensors").stat().st_size / 2**20
        measured = run_import(hf, work / "out")
        log(f"imported in {measured['seconds']:.1f}s")
        same, n = greedy_check(hf, work / "out", src[: args.check_sentences], args.max_len)
    columns = ["vocab", "d_model", "layers", "model.safetensors MiB", "import s", "peak RSS MiB"]
    columns += ["output MiB", "greedy = generate"]
    row = [f"{args.vocab:,}", str(args.d_model), f"{args.layers}+{args.layers}", f"{weights:.1f}"]
    row += [f"{measured['seconds']:.1f}", f"{measured['peak_rss_mib']:.0f}", f"{measured['output_mib']:.1f}"]
    row += [f"{same}/{n}"]
    print("`nmt import huggingface` of a random MarianMTModel (python -m nmt, one child process)")
    print("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n| " + " | ".join(row) + " |")
    if args.json:
        what = (
            f"`nmt import huggingface` of a random-weight MarianMTModel of opus-mt-en-de's shape "
            f"({settings(args)}), one child process; greedy outputs of {n} sentences against generate"
        )
        write_table(args.json, SCRIPT, what=what, columns=columns, rows=[row], measured=measured)
    return 0 if same == n else 1


if __name__ == "__main__":
    sys.exit(main())
