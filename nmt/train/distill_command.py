"""`nmt distill` from the command line: its arguments, then the four stages of nmt.train.distill
(the student's training is `nmt train --resume auto` on the student's data, so that rerunning the
same command resumes wherever it stopped)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import checkpoint as ckpt
from ..bulk.command import Pool, add_pool_args, plain_text_args, translate_sharded
from ..config import PRESETS
from .distill import (
    DistillError,
    DistillOptions,
    average_student,
    check_record,
    distill_targets,
    settings,
    student_calibration,
    student_data,
    student_shortlist,
    teacher_corpus,
)


def add_distill_args(parser: argparse.ArgumentParser) -> None:
    p = parser
    p.add_argument(
        "teachers",
        nargs="+",
        metavar="TEACHER",
        help="the teacher: a checkpoint or a run directory; several are translated as an ensemble",
    )
    p.add_argument("--out", required=True, help="the distillation's directory (rerun the command to resume)")
    p.add_argument(
        "--train",
        nargs=2,
        metavar=("SRC", "TGT"),
        help="training pairs (default: the files the teacher's data was prepared from, as its "
        "config.json records them)",
    )
    p.add_argument(
        "--valid", nargs=2, metavar=("SRC", "TGT"), help="validation pairs (default: the teacher's)"
    )
    p.add_argument("--test", nargs=2, metavar=("SRC", "TGT"), help="test pairs (default: the teacher's)")
    p.add_argument("--src", metavar="LANG", help="source language (default: the teacher's)")
    p.add_argument("--tgt", metavar="LANG", help="target language (default: the teacher's)")
    p.add_argument("--beam", type=int, default=DistillOptions.beam, help="the teacher's beam (default 4)")
    p.add_argument("--alpha", type=float, default=DistillOptions.alpha, help="length penalty (default 0.6)")
    p.add_argument(
        "--batch-tokens",
        type=int,
        default=DistillOptions.batch_tokens,
        metavar="N",
        help="padded source tokens per translation batch (default 2048)",
    )
    p.add_argument(
        "--chunk-sentences",
        type=int,
        default=DistillOptions.chunk_sentences,
        metavar="N",
        help="sentences per shard of the teacher's translations (a sharded job, OUT/distilled: "
        "`nmt translate-shards`): an interrupted run loses at most the shards it was translating",
    )
    add_pool_args(p)
    p.add_argument(
        "--teacher-precision",
        default=DistillOptions.teacher_precision,
        choices=["auto", "fp32", "bf16", "int8"],
        help="the teacher's precision while translating (as `nmt translate --precision`)",
    )
    p.add_argument(
        "--distilled-only",
        action="store_true",
        help="train the student on (source, teacher's translation) only, not also on the original pairs",
    )
    p.add_argument(
        "--preset",
        default=None,
        choices=sorted(PRESETS),
        help="the student's model and training (default: student, 6 encoder and 2 decoder layers, or "
        "the --config file's preset:; student-tiny: 6 and 1); --model.* / --train.* change them",
    )
    p.add_argument(
        "--config", help="YAML/JSON with the student's model: and train: sections, over the preset"
    )
    p.add_argument(
        "--shrink",
        action="store_true",
        help="start the student from the teacher's weights with fewer of its layers (shrink and "
        "fine-tune, Shleifer & Rush 2020): --model.n_encoder_layers (default: the teacher's) and "
        "--model.n_decoder_layers (default 1) choose them, --model.d_ff a narrower feed-forward "
        "network (its units of largest magnitude kept); the teacher's training settings (or "
        "--preset / --config's) train it",
    )
    p.add_argument(
        "--average-last",
        type=int,
        default=DistillOptions.average_last,
        metavar="N",
        help="average the student's last N checkpoints (default 5)",
    )
    p.add_argument(
        "--no-shortlist",
        action="store_true",
        help="write no OUT/average/shortlist.txt (default: a vocabulary shortlist of the student's "
        "data, `nmt shortlist`'s defaults, which the student then searches with unless "
        "`nmt translate --no-shortlist`)",
    )
    p.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    p.add_argument("--threads", type=int, default=DistillOptions.threads, help="SentencePiece threads")


def distill_options(args: argparse.Namespace) -> DistillOptions:
    return DistillOptions(
        teachers=tuple(args.teachers),
        out=args.out,
        beam=args.beam,
        alpha=args.alpha,
        batch_tokens=args.batch_tokens,
        chunk_sentences=args.chunk_sentences,
        teacher_precision=args.teacher_precision,
        distilled_only=args.distilled_only,
        preset=args.preset or (None if args.config or args.shrink else DistillOptions.preset),
        config=args.config,
        average_last=args.average_last,
        shrink=args.shrink,
        device=args.device,
        threads=args.threads,
        workers=args.workers,
        ray=args.ray,
        shortlist=not args.no_shortlist,
    ).check()


def teacher_translation(options: DistillOptions, teachers: list[Path]):
    """Stage 1's ``translate(source, output, job)``: `nmt translate-shards run --job JOB` of the
    teachers on each source line as one sentence (every real-text step off), with the distillation's
    beam, alpha, batch and precision, on --workers / --ray."""

    def translate(source: Path, output: Path, job: Path) -> int:
        argv = [*map(str, teachers), "-i", str(source), "-o", str(output), "--quiet", *plain_text_args()]
        argv += ["--beam", str(options.beam), "--batch-tokens", str(options.batch_tokens)]
        argv += ["--precision", options.teacher_precision]
        argv += [] if options.alpha is None else ["--alpha", repr(options.alpha)]
        argv += [] if options.device is None else ["--device", options.device]
        pool = Pool(workers=options.workers, ray=options.ray)
        return translate_sharded(argv, job, pool, shard_lines=options.chunk_sentences)

    return translate


def run_distill(args: argparse.Namespace, overrides: dict) -> int:
    """The four stages; each skips when its output is complete. 130 when Ctrl-C stopped training."""
    options = distill_options(args)
    teachers = [ckpt.resolve_checkpoint(t) for t in options.teachers]
    given = {s: getattr(args, s) for s in ("train", "valid", "test") if getattr(args, s)}
    corpus = teacher_corpus(teachers[0], given, langs=(args.src, args.tgt))
    out = Path(options.out)
    check_record(out, settings(options, corpus, teachers))
    distilled = distill_targets(options, corpus, teachers, translate=teacher_translation(options, teachers))
    if distilled is None:
        print(
            f"nmt distill: the teacher's translations ({out / 'distilled'}) are not finished; rerun the "
            "same command to continue",
            file=sys.stderr,
        )
        return 1 if options.workers else 0
    data = student_data(options, corpus, distilled, teachers[0])
    if (out / "average" / ckpt.MANIFEST).exists():
        print(f"3/6 student: {out / 'student'} is averaged (skipped)")
    else:
        init = None
        if options.shrink:
            init, overrides = shrunk_student(teachers[0], out / "student-init", overrides)
        shape = " + ".join(x for x in (options.preset, options.config, init and "the shrunk teacher") if x)
        print(f"3/6 student: {shape} on {data} -> {out / 'student'}")
        status = train_student(options, data, overrides, init=init)
        if status:
            return status
    average = average_student(options)
    listed = student_shortlist(options, data)
    student_calibration(options, data)
    searched = (
        f"  # searches with its shortlist {listed}; --no-shortlist: the full vocabulary" if listed else ""
    )
    print(
        f"student: {average}\n  translate: nmt translate {average} -i SRC -o OUT --beam 4{searched}\n"
        f"  int8 on CTranslate2: nmt export ctranslate2 {average} DIR --quantization int8"
    )
    return 0


def shrunk_student(teacher: Path, init: Path, overrides: dict) -> tuple[Path, dict]:
    """Stage 3 with --shrink: the teacher shrunk to the student's depths (--model.n_encoder_layers,
    default the teacher's; --model.n_decoder_layers, default 1) and feed-forward width
    (--model.d_ff, default the teacher's) written once at ``init``, and the overrides without those
    three (the student's training starts from ``init`` with its model)."""
    from .shrink import write_shrunk

    model = dict(overrides.get("model", {}))
    shape = {name: model.pop(name, None) for name in ("n_encoder_layers", "n_decoder_layers", "d_ff")}
    if not (init / ckpt.MANIFEST).exists():
        cfg = ckpt.model_config(teacher)
        enc = int(shape["n_encoder_layers"] or cfg.encoder_layers)
        dec = int(shape["n_decoder_layers"] or 1)
        d_ff = int(shape["d_ff"] or cfg.d_ff)
        write_shrunk(teacher, init, n_encoder_layers=enc, n_decoder_layers=dec, d_ff=d_ff)
        print(
            f"3/6 student: the teacher shrunk to {enc} encoder and {dec} decoder layers, d_ff {d_ff} "
            f"-> {init}"
        )
    return init, {**overrides, "model": model}


def train_student(options: DistillOptions, data: Path, overrides: dict, *, init: Path | None = None) -> int:
    """Stage 3: `nmt train DATA --out OUT/student --preset P [--config F] [--init I] --resume auto`:
    a rerun continues the run from its last checkpoint, a finished run is left as it is."""
    from .command import run_train

    args = argparse.Namespace(
        data_dir=str(data),
        out=str(Path(options.out) / "student"),
        preset=options.preset,
        config=options.config,
        resume="auto",
        device=options.device,
        init=None if init is None else str(init),
        init_optimizer=False,
    )
    status = run_train(args, overrides)
    if status:
        print(
            f"nmt distill: training stopped (exit {status}); rerun the same command to resume",
            file=sys.stderr,
        )
    return status


__all__ = ["DistillError", "add_distill_args", "run_distill"]
