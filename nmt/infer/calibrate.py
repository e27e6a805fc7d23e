"""`nmt calibrate`: a checkpoint's confidences fitted on a validation set (nmt.infer.confidence).

    samples = validation_samples(translator, sources, references, options)
    calibration = fit(samples, fitted_on={...})
    calibration.save(checkpoint_dir)          # confidence.json, read by Translator.load
    path, fitted = calibrate(translator, sources, references, options, directory=checkpoint_dir,
                             fitted_on={...})  # the three steps and a Report (`nmt calibrate`, `nmt distill`)

Each validation source is translated as a sentence (the search ``options``: the paper's beam 4
and alpha 0.6 by default) and scored by teacher forcing; its chrF against the reference, its
words found in the reference, and the reference's length in pieces over the source's are what
the calibration is fitted to. Use a validation set, never a test set.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from .confidence import Sample, fit, spearman, word_log_probs
from .options import SearchOptions
from .search import reading_order


@dataclass
class Report:
    """What a calibration was fitted on and how well the raw score ranks the sentences."""

    sentences: int
    spearman: float  # of the sentence confidence with the sentence chrF, on the fitting set
    worst_caught: float  # of the 10% lowest-chrF sentences, the share among the 10% least confident


def reference_words(reference: str) -> Counter:
    return Counter(w.lower() for w in reference.split())


def sample_of(translator, source_ids: list[int], t, reference: str) -> Sample:
    """One validation sentence as the calibration reads it."""
    from sacrebleu.metrics import CHRF

    sp = translator.tgt_sp  # the output's pieces and the reference: target text
    order = reading_order(translator.model, list(range(len(t.tokens))))
    pieces = [sp.id_to_piece(t.tokens[k]) for k in order]
    words = word_log_probs(pieces, [t.log_probs[k] for k in order])
    pool = reference_words(reference)
    labelled = []
    for w, lp in words:
        found = pool[w.lower()] > 0
        pool[w.lower()] -= found
        labelled.append((lp, found))
    ref_pieces = len(sp.encode(reference))
    n_source = len(source_ids) - 1
    return Sample(
        log_probs=t.log_probs,
        chrf=CHRF().sentence_score(t.text, [reference]).score,
        words=labelled,
        ratio=(ref_pieces + 1) / n_source if n_source > 0 else None,
    )


def validation_samples(
    translator, sources: list[str], references: list[str], options: SearchOptions, *, batch_tokens: int = 2048
) -> list[Sample]:
    """The validation pairs translated, scored and measured (empty sources left out)."""
    from ..realtext.quality import score_results

    results = translator.translate_nbest(sources, options.replace(nbest=1), batch_tokens=batch_tokens)
    score_results(translator, sources, results, coverage=False)
    ids, _ = translator.encode(sources)
    return [
        sample_of(translator, src, r[0], ref)
        for src, r, ref in zip(ids, results, references)
        if src and r and r[0].log_probs
    ]


def report(calibration, samples: list[Sample]) -> Report:
    """How the calibrated sentence confidence ranks ``samples``' chrF."""
    confidences = [calibration.sentence(s.log_probs) for s in samples]
    chrfs = [s.chrf for s in samples]
    return Report(len(samples), spearman(confidences, chrfs), worst_caught(confidences, chrfs))


def calibrate(
    translator,
    sources: list[str],
    references: list[str],
    options: SearchOptions,
    *,
    directory: Path,
    fitted_on: dict,
    batch_tokens: int = 2048,
) -> tuple[Path, Report]:
    """The translator's confidences fitted on the validation pairs and written as confidence.json
    into ``directory`` (``fitted_on``: what they were, recorded with the fit's Report); returns the
    file and the Report."""
    samples = validation_samples(translator, sources, references, options, batch_tokens=batch_tokens)
    calibration = fit(samples, fitted_on={**fitted_on, "sentences": len(samples)})
    fitted = report(calibration, samples)
    calibration.fitted_on.update({k: round(v, 4) for k, v in asdict(fitted).items() if k != "sentences"})
    directory.mkdir(parents=True, exist_ok=True)
    return calibration.save(directory), fitted


def worst_caught(confidences: list[float], qualities: list[float], share: float = 0.1) -> float:
    """Of the ``share`` lowest-quality sentences, the fraction among the ``share`` least confident."""
    n = max(1, int(len(qualities) * share))
    worst = set(sorted(range(len(qualities)), key=lambda i: qualities[i])[:n])
    doubted = set(sorted(range(len(confidences)), key=lambda i: confidences[i])[:n])
    return len(worst & doubted) / n
