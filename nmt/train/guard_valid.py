"""The guard of what a fine-tuned model knew: a second validation set, scored (BLEU) at every
validation beside the run's own (`nmt train --init CKPT --guard-valid DIR_OR_FILES
--guard-bleu-drop B`).

The run validates the model it starts from at update 0; that validation's guard BLEU is the start.
The best checkpoint is then the best in-domain one (``train.best_metric``: valid loss or BLEU) whose
guard BLEU is at least the start minus B (`admits`); a validation better in-domain but below that is
no best (patience counts it as none). The model the run starts from is itself a candidate, so a run
whose every later checkpoint forgets too much keeps it as ``best``. `best_of` is the rule over a
whole run's validations.

The guard set is a prepared directory's valid split (it must have the run's vocabulary), or two text
files, source and reference, encoded with the run's SentencePiece model as `nmt translate` encodes
(cleaned, no target tag: a multi-target run takes a prepared directory, whose sources carry theirs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config import ConfigError
from ..data.dataset import ParallelDataset, load_meta
from ..data.lines import clean_line, read_pairs
from ..infer.options import SearchOptions
from ..vocab import load_spm
from .finetune import vocabulary_difference
from .stopping import better
from .validation import bleu_of_sources, reference_lines


class GuardError(ConfigError):
    """A --guard-valid set or bound that cannot serve this run."""


@dataclass(frozen=True)
class GuardSet:
    """The guard's sentences (piece ids, no EOS) and references, where they came from, the bound."""

    given: tuple[str, ...]  # DIR, or SRC TGT, as given
    sources: list[list[int]]
    references: list[str]
    bleu_drop: float
    tgt_lang: str = ""

    def note(self) -> str:
        """What the log says of the guard."""
        return (
            f"guard: {len(self.sources)} sentences of {' '.join(self.given)}; the best checkpoint keeps "
            f"its guard BLEU within {self.bleu_drop} of update 0's"
        )

    def record(self) -> dict:
        """config.json's "guard"."""
        paths = [str(Path(p).resolve()) for p in self.given]
        return {"valid": paths, "bleu_drop": self.bleu_drop, "sentences": len(self.sources)}


def open_guard(given: list[str], *, bleu_drop: float, data_dir: str | Path) -> GuardSet:
    """The guard set of ``given`` (a prepared DIR, whose valid split it takes, or SRC TGT text files)
    for a run on ``data_dir``."""
    if not bleu_drop >= 0.0:
        raise GuardError(f"--guard-bleu-drop {bleu_drop}: must be >= 0 (BLEU points below the start)")
    meta = load_meta(data_dir)
    if len(given) == 1:
        directory = Path(given[0])
        try:
            difference = vocabulary_difference(directory, data_dir)
        except ValueError as e:
            raise GuardError(f"--guard-valid {directory}: {e}") from None
        if difference:
            raise GuardError(f"--guard-valid {directory}: {difference}; it must have the run's vocabulary")
        valid = ParallelDataset.load(directory, "valid")
        sources = [valid[i][0].tolist() for i in range(len(valid))]
        references = reference_lines(directory, "valid", len(valid))
        tgt_lang = valid.meta.get("tgt_lang", "")
    elif len(given) == 2:
        if meta.get("tgt_langs"):
            raise GuardError(
                "--guard-valid SRC TGT: a multi-target run's sources need their target tag; give a "
                "directory prepared with its vocabulary"
            )
        sp = load_spm(data_dir)
        pairs = list(read_pairs(*given))
        sources = [sp.encode(clean_line(s)) for s, _ in pairs]
        references = [clean_line(t) for _, t in pairs]
        tgt_lang = meta.get("tgt_lang", "")
    else:
        raise GuardError(f"--guard-valid {' '.join(given)}: give a prepared DIR or SRC TGT")
    if not sources:
        raise GuardError(f"--guard-valid {' '.join(given)}: no sentences")
    return GuardSet(tuple(given), sources, references, bleu_drop, tgt_lang)


def guard_scores(
    model, guard: GuardSet, options: SearchOptions, *, sp, max_sentences: int = 0, **search
) -> dict:
    """The model's guard BLEU and chrF (``guard_bleu``, ``guard_chrf``), decoded with the run's
    SentencePiece model ``sp`` (its target side's); ``max_sentences`` > 0: the first N; ``search``:
    device, amp_dtype, batch_tokens."""
    n = len(guard.sources) if max_sentences <= 0 else min(max_sentences, len(guard.sources))
    scores = bleu_of_sources(
        model,
        guard.sources[:n],
        guard.references[:n],
        sp=sp,
        options=options,
        tgt_lang=guard.tgt_lang,
        **search,
    )
    return {"guard_bleu": scores["bleu"], "guard_chrf": scores["chrf"]}


def admits(guard_bleu: float, *, start: float, bleu_drop: float) -> bool:
    """Whether a validation whose guard BLEU is ``guard_bleu`` stays within ``bleu_drop`` of the
    ``start`` (the guard BLEU of the model the run started from)."""
    return guard_bleu >= start - bleu_drop


def best_of(validations: list[dict], *, best_metric: str, bleu_drop: float) -> int | None:
    """The index of the best of a run's ``validations`` (in order, the first at update 0: the start),
    each with its in-domain score ("loss" or "bleu", as ``best_metric``) and its "guard_bleu": the best
    in-domain among those the guard admits (a tie keeps the earlier); None without any."""
    best, chosen = None, None
    start = validations[0]["guard_bleu"] if validations else 0.0
    for i, v in enumerate(validations):
        value = v[best_metric]
        if admits(v["guard_bleu"], start=start, bleu_drop=bleu_drop) and better(best_metric, value, best):
            best, chosen = value, i
    return chosen
