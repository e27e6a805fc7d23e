"""Sequence-level knowledge distillation (Kim & Rush 2016), not in the paper: a teacher (one checkpoint
or an ensemble) translates the training sources with beam search, and a smaller, faster student is
trained on its translations (`nmt distill`; the command and the student's training live in
nmt.train.distill_command).

The stages, each of which a rerun of the same command skips once its output is complete:
  1. the teacher translates the training sources as a sharded job (nmt.bulk) in ``OUT/distilled``,
     in shards of ``chunk_sentences`` lines, each written atomically: an interrupted run translates
     only the shards not finished (on local workers, Ray, or any scheduler's tasks); then the
     shards are assembled into ``OUT/train.distilled.TGT``;
  2. the student's data (``OUT/data``) is prepared with the teacher's SentencePiece model, from the
     original pairs plus (source, teacher's translation), or from the distilled pairs only;
  3. the student trains (``OUT/student``, resumed as `nmt train --resume auto` resumes); with
     ``shrink``, from the teacher's weights and fewer of its layers (``OUT/student-init``,
     nmt.train.shrink) rather than from random weights;
  4. its last checkpoints are averaged (``OUT/average``, section 6.1);
  5. a vocabulary shortlist of the student's data is written beside its weights
     (``OUT/average/shortlist.txt``, nmt.infer.shortlist), which the student translates with by
     default (a student's output projection over the whole vocabulary is much of its time at beam 4);
  6. its confidences are calibrated on the data's validation split (``OUT/average/confidence.json``,
     `nmt calibrate`'s beam 4 and alpha 0.6, searched as the student searches by default), so that
     its translations carry calibrated confidences and the low-confidence guard, as a recipe's do.
``OUT/distill.json`` records the settings that the finished stages depend on; a rerun with other
settings is refused, naming the first that differs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import atomic
from .. import checkpoint as ckpt
from ..data.download import DataError
from ..data.lines import read_lines
from ..data.prepare import PrepareOptions, prepare

RECORD = "distill.json"


class DistillError(DataError):
    """A user-facing error of `nmt distill`; the message names the file or the option."""


@dataclass(frozen=True)
class Corpus:
    """The student's corpus: (source, target) files of each split and the two languages."""

    src_lang: str
    tgt_lang: str
    splits: dict  # split name -> (source path, target path); "train" always, "valid" / "test" if known


@dataclass(frozen=True)
class DistillOptions:
    """Everything `nmt distill` needs. ``teachers``: checkpoints (or run directories), more than one
    an ensemble; ``alpha`` None: the translator's default for the beam."""

    teachers: tuple[str, ...]
    out: str
    beam: int = 4
    alpha: float | None = 0.6
    batch_tokens: int = 2048
    chunk_sentences: int = 1000
    teacher_precision: str = "auto"
    distilled_only: bool = False  # False: the original pairs and the distilled pairs
    preset: str | None = "student"  # None: a --config file's preset: (as `nmt train --config`)
    config: str | None = None  # a --config file for the student's training (over the preset)
    average_last: int = 5
    shrink: bool = False  # the student starts from the teacher's weights (nmt.train.shrink)
    device: str | None = None
    threads: int = 2  # SentencePiece encoding of the student's data
    workers: int = 1  # the teacher's translation: worker processes (or Ray actors); 0: planned only
    ray: str | None = None  # None: local workers; else Ray's address ("": a local Ray)
    shortlist: bool = True  # OUT/shortlist.txt from the student's data (nmt.infer.shortlist)

    def check(self) -> "DistillOptions":
        if not self.teachers:
            raise DistillError("no teacher: give one checkpoint, or several for an ensemble")
        for name, value in (
            ("--beam", self.beam),
            ("--batch-tokens", self.batch_tokens),
            ("--chunk-sentences", self.chunk_sentences),
            ("--average-last", self.average_last),
        ):
            if value < 1:
                raise DistillError(f"{name} {value}: must be a positive integer")
        if self.workers < 0:
            raise DistillError(f"--workers {self.workers}: must be >= 0 (0: plan the translations only)")
        return self


def teacher_corpus(teacher: Path, given: dict, *, langs: tuple[str | None, str | None]) -> Corpus:
    """The corpus the student learns from: the files given (--train / --valid / --test), else those
    the teacher's data was prepared from (its config.json records their paths and sha256); the
    languages given, else the teacher's. DistillError where neither names a training corpus."""
    data = ckpt.read_config(teacher).get("data") or {}
    inputs = data.get("inputs") or {}
    splits = {}
    for split in ("train", "valid", "test"):
        if split in given:
            splits[split] = tuple(Path(p) for p in given[split])
        elif split in inputs:
            splits[split] = recorded_pair(teacher, split, inputs[split])
    if "train" not in splits:
        raise DistillError(
            f"{teacher}/config.json records no training files of the teacher: give --train SRC TGT"
        )
    src, tgt = langs[0] or data.get("src_lang"), langs[1] or data.get("tgt_lang")
    if not src or not tgt:
        raise DistillError(f"{teacher}/config.json records no languages: give --src and --tgt")
    return Corpus(src_lang=src, tgt_lang=tgt, splits=splits)


def recorded_pair(teacher: Path, split: str, record: dict) -> tuple[Path, Path]:
    """The (source, target) files config.json records for ``split``, checked to be there unchanged."""
    paths = []
    for side in ("src", "tgt"):
        path = Path(record[side]["path"])
        if not path.is_file():
            raise DistillError(
                f"{path}: the teacher's {split} file ({teacher}/config.json) is missing: give "
                f"--{split} SRC TGT"
            )
        if ckpt.sha256_file(path) != record[side]["sha256"]:
            raise DistillError(
                f"{path}: changed since the teacher's data was prepared from it (sha256 differs from "
                f"{teacher}/config.json): give --{split} SRC TGT"
            )
        paths.append(path)
    return paths[0], paths[1]


# ----------------------------------------------------------------------------- the record of settings
def settings(options: DistillOptions, corpus: Corpus, teachers: list[Path]) -> dict:
    """What the finished stages depend on: the teachers' weights, the corpus and the search (stage 1),
    the data's composition (stage 2)."""
    return {
        "teachers": [{"path": str(t), "sha256": weights_sha256(t)} for t in teachers],
        "languages": [corpus.src_lang, corpus.tgt_lang],
        "train": [str(p) for p in corpus.splits["train"]],
        "train_sha256": ckpt.sha256_file(Path(corpus.splits["train"][0])),
        "beam": options.beam,
        "alpha": options.alpha,
        "chunk_sentences": options.chunk_sentences,
        "distilled_only": options.distilled_only,
    }


def weights_sha256(checkpoint: Path) -> str:
    """model.safetensors' sha256 as the checkpoint's manifest records it (verified when loaded)."""
    manifest = ckpt.read_json(checkpoint / ckpt.MANIFEST)
    return manifest["model.safetensors"]["sha256"]


def check_record(out: Path, record: dict) -> None:
    """Write OUT/distill.json, or compare a rerun's settings with it: DistillError naming the first
    setting that differs (a finished stage would not match them)."""
    path = out / RECORD
    if not path.exists():
        out.mkdir(parents=True, exist_ok=True)
        atomic.write_text(path, json.dumps(record, indent=2) + "\n")
        return
    saved = ckpt.read_json(path)
    for key, value in record.items():
        if saved.get(key) != value:
            raise DistillError(
                f"{path}: this run was made with {key}={json.dumps(saved.get(key))}, not "
                f"{json.dumps(value)}; rerun it with its settings, or choose another --out"
            )


# ----------------------------------------------------------------------------- 1. the teacher translates
def distill_targets(
    options: DistillOptions,
    corpus: Corpus,
    teachers: list[Path],
    *,
    translate: Callable[[Path, Path, Path], int],
    log=print,
) -> Path | None:
    """Stage 1: OUT/train.distilled.TGT, the teacher's translation of every training source line (line
    for line), by ``translate(source, output, job)`` (its exit status): the sharded job at
    OUT/distilled, whose finished shards are never translated again. None while it is not finished
    (planned only, or a worker died)."""
    out = Path(options.out)
    joined = out / f"train.distilled.{corpus.tgt_lang}"
    if joined.exists():
        log(f"1/6 teacher translations: {joined} is complete (skipped)")
        return joined
    source = Path(corpus.splits["train"][0])
    plural = "s" if len(teachers) > 1 else ""
    log(
        f"1/6 teacher translations: {source} in shards of {options.chunk_sentences:,} lines "
        f"({out / 'distilled'}; beam {options.beam}, {len(teachers)} teacher{plural})"
    )
    out.mkdir(parents=True, exist_ok=True)
    status = translate(source, joined, out / "distilled")
    return joined if status == 0 and joined.exists() else None


# ----------------------------------------------------------------------------- 2. the student's data
def student_data(
    options: DistillOptions, corpus: Corpus, distilled: Path, teacher: Path, *, log=print
) -> Path:
    """Stage 2: OUT/data, prepared (`nmt prepare files`) with the teacher's SentencePiece model from
    the original pairs followed by the distilled ones, or from the distilled ones only."""
    out = Path(options.out)
    data = out / "data"
    if (data / "meta.json").exists():
        log(f"2/6 student data: {data} is prepared (skipped)")
        return data
    src, tgt = corpus.splits["train"]
    mixed = (out / f".train.{corpus.src_lang}", out / f".train.{corpus.tgt_lang}")
    with open(mixed[0], "w", encoding="utf-8") as fs, open(mixed[1], "w", encoding="utf-8") as ft:
        if not options.distilled_only:
            for path, f in ((src, fs), (tgt, ft)):
                f.writelines(line + "\n" for line in read_lines(path))
        fs.writelines(line + "\n" for line in read_lines(src))
        ft.writelines(line + "\n" for line in read_lines(distilled))
    what = "distilled pairs only" if options.distilled_only else "original + distilled pairs"
    log(f"2/6 student data: {what}, the teacher's vocabulary ({teacher}/spm.model)")
    splits = {"train": mixed, **{s: p for s, p in corpus.splits.items() if s != "train"}}
    prepare(
        {s: (Path(a), Path(b)) for s, (a, b) in splits.items()},
        data,
        options=PrepareOptions(
            dataset="files",
            src_lang=corpus.src_lang,
            tgt_lang=corpus.tgt_lang,
            spm_model=str(teacher),
            threads=options.threads,
        ),
        log=log,
    )
    for path in mixed:
        os.unlink(path)
    return data


# ----------------------------------------------------------------------------- 4. averaging
def average_student(options: DistillOptions, *, log=print) -> Path:
    """Stage 4: OUT/average, the mean of the student's last ``average_last`` checkpoints (fewer if the
    run wrote fewer)."""
    from .average import average_run

    out = Path(options.out)
    average = out / "average"
    if (average / ckpt.MANIFEST).exists():
        log(f"4/6 average: {average} is written (skipped)")
        return average
    steps = ckpt.list_step_checkpoints(out / "student")
    if not steps:
        raise DistillError(f"{out}/student: the student wrote no checkpoint (a training budget too short?)")
    chosen = average_run(out / "student", last=min(options.average_last, len(steps)), out=average)
    log(f"4/6 average: {len(chosen)} checkpoints ({chosen[0].name} .. {chosen[-1].name}) -> {average}")
    return average


def student_shortlist(options: DistillOptions, data: Path, *, log=print) -> Path | None:
    """Stage 5: OUT/average/shortlist.txt, the vocabulary shortlist of the student's data (`nmt
    shortlist DATA`'s defaults: the original and the teacher's pairs), which the student searches
    with by default (the checkpoint's own shortlist, nmt.infer.shortlist.of_checkpoint); None
    without ``options.shortlist``."""
    from ..infer import shortlist

    if not options.shortlist:
        return None
    path = Path(options.out) / "average" / shortlist.CHECKPOINT_FILE
    if path.exists():
        log(f"5/6 shortlist: {path} is written (skipped)")
        return path
    built = shortlist.build(data, log=lambda m: None)
    shortlist.save(built, path)
    log(f"5/6 shortlist: {path} ({len(built.candidates):,} source pieces, from {data})")
    return path


def student_calibration(options: DistillOptions, data: Path, *, log=print) -> Path | None:
    """Stage 6: OUT/average/confidence.json, the student's confidences fitted on its data's
    validation pairs (nmt.infer.calibrate; beam 4, alpha 0.6, with its shortlist when it has one);
    None where the data has no validation text."""
    from ..infer.calibrate import calibrate
    from ..infer.confidence import CALIBRATION
    from ..infer.options import SearchOptions
    from ..infer.translate import Translator, read_text_lines

    average = Path(options.out) / "average"
    path = average / CALIBRATION
    if path.exists():
        log(f"6/6 calibration: {path} is written (skipped)")
        return path
    meta = json.loads((data / "meta.json").read_text(encoding="utf-8"))
    text = meta.get("splits", {}).get("valid", {}).get("text")
    if not text:
        log(f"6/6 calibration: {data} has no validation text (skipped; `nmt calibrate` calibrates)")
        return None
    src, ref = (data / name for name in text)
    translator = Translator.load(average, device=options.device)
    search = SearchOptions(beam=4, alpha=0.6)
    fitted_on = {"src": src.name, "ref": ref.name, "beam": 4, "alpha": 0.6}
    path, fitted = calibrate(
        translator,
        read_text_lines(str(src)),
        read_text_lines(str(ref)),
        search,
        directory=average,
        fitted_on=fitted_on,
    )
    log(
        f"6/6 calibration: {path} (fitted on {fitted.sentences:,} sentences of {src}; Spearman of "
        f"confidence and sentence chrF {fitted.spearman:.3f})"
    )
    return path
