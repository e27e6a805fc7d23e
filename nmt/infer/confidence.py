"""Confidence from the model's own probabilities: a translation's sentence confidence and each
word's, calibrated on a validation set (no second model, nothing downloaded).

    scores = forced_scores(model, sources, outputs, coverage=True)   # one teacher-forced pass
    calibration = Calibration.load(checkpoint_dir)                    # confidence.json, or none
    calibration.sentence(scores[0].log_probs)                        # 0..1
    words(sp, tokens, scores[0].log_probs, calibration)             # [WordConfidence, ...]

``forced_scores`` runs the model once over each source and its translation, as in training
(teacher forcing), batched: the log-probability of every output piece and of EOS, and with
``coverage`` the attention mass each source piece received from the output (the last decoder
layer's encoder-decoder attention averaged over heads, as nmt.infer.attention_maps aligns, summed
over the output pieces): a source word nothing attends to is likely omitted (nmt.infer.guards).

What the numbers mean. Uncalibrated (a checkpoint without confidence.json), a sentence's
confidence is the geometric mean of its pieces' probabilities (EOS included), a word's that of
its pieces. ``nmt calibrate CHECKPOINT --src valid.src --ref valid.ref`` fits, on a validation
set only, (1) for sentences a monotone map (isotonic regression) from a score (a least-squares
mix of the mean and the least piece log-probability) to the sentence's chrF against its reference
/ 100: a calibrated confidence of 0.6 is the chrF such sentences had on the validation set;
(2) for words a logistic map from the word's mean piece log-probability to the probability
that the word occurs in the reference (a bag-of-words match, as word-level quality labels are
made without post-edits). The length ratios of the validation references (pieces out / pieces in)
are kept beside them for the length guard.
"""

from __future__ import annotations

import contextlib
import json
import math
from bisect import bisect_right
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from ..errors import UserError
from ..fused_projections import unfused
from ..vocab import BOS, EOS, PAD

CALIBRATION = "confidence.json"
FLOOR = -30.0  # the least log-probability a piece counts with (a log of 0 would swamp a mean)


class CalibrationError(UserError):
    """A confidence.json that cannot be read; the message names the file."""


@dataclass
class ForcedScores:
    """One translation scored by teacher forcing: ``log_probs`` of each output piece (the model's
    order) then of EOS; ``coverage``: per source piece (EOS excluded) the attention it received."""

    log_probs: list[float]
    coverage: list[float] | None = None


def batches_of(lengths: list[int], max_sentences: int, max_tokens: int) -> list[list[int]]:
    """Indices in batches of similar length: at most ``max_sentences`` each, at most
    ``max_tokens`` of padded output per batch."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    out: list[list[int]] = []
    for i in order:
        if out and len(out[-1]) < max_sentences and (len(out[-1]) + 1) * (lengths[i] + 1) <= max_tokens:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def padded(rows: list[list[int]], device) -> Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows], device=device)  # (B, width)


@torch.no_grad()
def forced_scores(
    model,
    sources: list[list[int]],
    outputs: list[list[int]],
    *,
    coverage: bool = False,
    max_tokens: int = 4096,
) -> list[ForcedScores]:
    """Teacher-forced log-probabilities (and with ``coverage`` the source coverage) of
    ``outputs[i]`` (ids without BOS/EOS, the model's order) given ``sources[i]`` (ids + EOS).
    An empty source gives empty scores."""
    results = [ForcedScores([]) for _ in sources]
    todo = [i for i, s in enumerate(sources) if s]
    device = next(model.parameters()).device
    for batch in batches_of([len(outputs[i]) for i in todo], 64, max_tokens):
        idx = [todo[j] for j in batch]
        src = padded([sources[i] for i in idx], device)  # (B, S)
        tgt_in = padded([[BOS] + outputs[i] for i in idx], device)  # (B, T)
        tgt_out = padded([outputs[i] + [EOS] for i in idx], device)  # (B, T)
        logits, weights = teacher_forced(model, src, tgt_in, coverage)  # (B, T, W), (B, T, S) or None
        logp = logits.float().log_softmax(-1).gather(-1, tgt_out.unsqueeze(-1)).squeeze(-1)  # (B, T)
        for b, i in enumerate(idx):
            n = len(outputs[i]) + 1
            lp = [max(x, FLOOR) for x in logp[b, :n].tolist()]
            cov = None
            if weights is not None:
                s = len(sources[i]) - (sources[i][-1] == EOS)  # EOS excluded
                cov = weights[b, : n - 1, :s].sum(0).tolist()  # (s,): mass from the output pieces
            results[i] = ForcedScores(lp, cov)
    return results


def forward(model, src: Tensor, tgt_in: Tensor) -> Tensor:
    """Logits (B, T, W) of BOS + output (B, T) given the source (B, S): ``encode`` and one
    ``decode_step`` over every position (what a search reads, so that any model a search takes
    does)."""
    logits, _ = model.decode_step(tgt_in, model.encode(src), None)
    return logits


def teacher_forced(model, src: Tensor, tgt_in: Tensor, coverage: bool) -> tuple[Tensor, Tensor | None]:
    """Logits (B, T, W) of a teacher-forced pass and, with ``coverage``, the last decoder layer's
    encoder-decoder attention averaged over heads (B, T, S) (recomputed from its q/k projections,
    as nmt.infer.attention_maps does)."""
    attn, seen, hooks = model.decoder.layers[-1].encoder_attn if coverage else None, {}, []
    if coverage:
        hooks = [
            attn.q_proj.register_forward_hook(lambda m, i, out: seen.__setitem__("q", out)),
            attn.k_proj.register_forward_hook(lambda m, i, out: seen.__setitem__("k", out)),
        ]
    was_training = model.training
    model.eval()
    try:
        with unfused(model) if coverage else contextlib.nullcontext():
            logits = forward(model, src, tgt_in)  # (B, T, W)
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    if not coverage:
        return logits, None
    cfg = model.cfg
    b, t, s = src.size(0), tgt_in.size(1), src.size(1)
    q = seen["q"].float().view(b, t, cfg.n_heads, cfg.d_k).transpose(1, 2)  # (B, H, T, K)
    k = seen["k"].float().view(b, s, cfg.n_heads, cfg.d_k).transpose(1, 2)  # (B, H, S, K)
    scores = q @ k.transpose(2, 3) / math.sqrt(cfg.d_k)  # (B, H, T, S)
    scores = scores.masked_fill(src.eq(PAD)[:, None, None, :], float("-inf"))
    return logits, scores.softmax(-1).mean(1)  # (B, T, S)


# ----------------------------------------------------------------------------- calibration
@dataclass
class Isotonic:
    """A non-decreasing map: the blocks of pool-adjacent-violators, ``xs`` their mean scores
    (ascending), ``ys`` their mean targets; linear between them, flat beyond."""

    xs: list[float]
    ys: list[float]

    def __call__(self, x: float) -> float:
        k = bisect_right(self.xs, x)
        if k == 0:
            return self.ys[0]
        if k == len(self.xs):
            return self.ys[-1]
        x0, x1, y0, y1 = self.xs[k - 1], self.xs[k], self.ys[k - 1], self.ys[k]
        return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1

    @classmethod
    def fit(cls, x: list[float], y: list[float]) -> Isotonic:
        """Pool-adjacent-violators over the points sorted by x."""
        tied: dict[float, list[float]] = {}  # equal scores pooled first: one score, one value
        for xi, yi in zip(x, y):
            tied.setdefault(xi, [0.0, 0.0])
            tied[xi][0] += yi
            tied[xi][1] += 1
        blocks: list[list[float]] = []  # [sum x, sum y, count]
        for xi in sorted(tied):
            sy, n = tied[xi]
            blocks.append([xi * n, sy, n])
            while len(blocks) > 1 and blocks[-2][1] / blocks[-2][2] >= blocks[-1][1] / blocks[-1][2]:
                sx, sy, n = blocks.pop()
                blocks[-1][0] += sx
                blocks[-1][1] += sy
                blocks[-1][2] += n
        return cls([b[0] / b[2] for b in blocks], [b[1] / b[2] for b in blocks])


@dataclass
class Calibration:
    """How raw scores become confidences (see the module's docstring); ``Calibration()`` is the
    uncalibrated one."""

    mix: list[float] | None = None  # weights of [mean log-prob, least log-prob, 1]
    sentence_map: Isotonic | None = None
    word_logistic: list[float] | None = None  # a, b: sigmoid(a * mean piece log-prob + b)
    length_ratio: list[float] = field(default_factory=lambda: [0.3, 3.0])  # (least, most) out/in
    fitted_on: dict = field(default_factory=dict)  # what it was fitted on: file names, lines, fit

    @property
    def calibrated(self) -> bool:
        return self.sentence_map is not None

    def raw(self, log_probs: list[float]) -> float:
        """The score the sentence map reads: the mix of mean and least log-probability."""
        if not log_probs:
            return 0.0
        mean, least = sum(log_probs) / len(log_probs), min(log_probs)
        if self.mix is None:
            return mean
        return self.mix[0] * mean + self.mix[1] * least + self.mix[2]

    def sentence(self, log_probs: list[float]) -> float:
        """A sentence's confidence in [0, 1] from its pieces' (and EOS's) log-probabilities."""
        if not log_probs:
            return 1.0
        if self.sentence_map is None:
            return math.exp(sum(log_probs) / len(log_probs))
        return min(max(self.sentence_map(self.raw(log_probs)), 0.0), 1.0)

    def word(self, mean_log_prob: float) -> float:
        if self.word_logistic is None:
            return math.exp(mean_log_prob)
        a, b = self.word_logistic
        return 1.0 / (1.0 + math.exp(-(a * mean_log_prob + b)))

    def save(self, directory: str | Path) -> Path:
        from ..checkpoint import write_json

        path = Path(directory) / CALIBRATION
        write_json(path, asdict(self))
        return path

    @classmethod
    def load(cls, directory: str | Path | None) -> Calibration:
        """The checkpoint's confidence.json, or the uncalibrated one where it has none."""
        path = None if directory is None else Path(directory) / CALIBRATION
        if path is None or not path.is_file():
            return cls()
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            iso = raw.get("sentence_map")
            return cls(
                mix=raw.get("mix"),
                sentence_map=None if iso is None else checked_map(iso),
                word_logistic=raw.get("word_logistic"),
                length_ratio=[float(x) for x in raw.get("length_ratio", [0.3, 3.0])][:2],
                fitted_on=raw.get("fitted_on", {}),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CalibrationError(
                f"{path}: not a confidence calibration ({e}); rerun nmt calibrate"
            ) from None


def checked_map(raw: dict) -> Isotonic:
    """The sentence map of a confidence.json: xs ascending, as many ys, at least one."""
    xs, ys = [float(x) for x in raw["xs"]], [float(y) for y in raw["ys"]]
    if not xs or len(xs) != len(ys) or any(b < a for a, b in zip(xs, xs[1:])):
        raise ValueError(f"sentence_map: {len(xs)} xs (ascending) and {len(ys)} ys, at least one each")
    return Isotonic(xs, ys)


def calibration_of(checkpoint) -> Calibration:
    """The calibration of a checkpoint or run directory (checkpoint.resolve_checkpoint's), or of a
    CTranslate2 export through the checkpoint it was exported from; uncalibrated where none."""
    from .. import checkpoint as ckpt

    folder = Path(checkpoint)
    if (folder / CALIBRATION).is_file():
        return Calibration.load(folder)
    try:
        if (folder / "nmt_export.json").is_file():
            folder = Path(ckpt.read_json(folder / "nmt_export.json")["source"])
        return Calibration.load(ckpt.resolve_checkpoint(folder))
    except (ckpt.CheckpointError, KeyError, TypeError):
        return Calibration()


def least_squares(features: list[list[float]], y: list[float]) -> list[float]:
    """Weights w minimising |X w - y|^2 (X: ``features`` rows)."""
    x = torch.tensor(features, dtype=torch.float64)  # (N, F)
    t = torch.tensor(y, dtype=torch.float64)[:, None]  # (N, 1)
    ridge = 1e-9 * torch.eye(x.size(1), dtype=torch.float64)  # collinear features: the least-norm mix
    return torch.linalg.solve(x.T @ x + ridge, x.T @ t)[:, 0].tolist()


def logistic(x: list[float], labels: list[bool], steps: int = 50) -> list[float]:
    """a, b of sigmoid(a x + b) fitted by Newton's method (a little ridge keeps it finite)."""
    xs = torch.tensor(x, dtype=torch.float64)
    ys = torch.tensor([float(v) for v in labels], dtype=torch.float64)
    design = torch.stack([xs, torch.ones_like(xs)], 1)  # (N, 2)
    w = torch.zeros(2, dtype=torch.float64)
    for _ in range(steps):
        p = torch.sigmoid(design @ w)  # (N,)
        grad = design.T @ (p - ys) + 1e-3 * w
        hess = design.T @ (design * (p * (1 - p))[:, None]) + 1e-3 * torch.eye(2, dtype=torch.float64)
        w = w - torch.linalg.solve(hess, grad)
    return w.tolist()


def quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(int(q * (len(s) - 1) + 0.5), len(s) - 1)]


@dataclass
class Sample:
    """One validation sentence: its pieces' log-probabilities, its chrF (0-100), and per output
    word (mean piece log-probability, whether the reference holds it); ``ratio``: the reference's
    pieces over the source's."""

    log_probs: list[float]
    chrf: float
    words: list[tuple[float, bool]]
    ratio: float | None


def fit(samples: list[Sample], fitted_on: dict) -> Calibration:
    """A Calibration fitted on validation ``samples`` (see the module's docstring)."""
    if len(samples) < 20:
        raise CalibrationError(f"calibration needs at least 20 sentences, got {len(samples)}")
    rows = [[sum(s.log_probs) / len(s.log_probs), min(s.log_probs), 1.0] for s in samples if s.log_probs]
    chrfs = [s.chrf / 100 for s in samples if s.log_probs]
    mix = least_squares(rows, chrfs)
    raw = [sum(w * f for w, f in zip(mix, r)) for r in rows]
    word_x = [lp for s in samples for lp, _ in s.words]
    word_y = [ok for s in samples for _, ok in s.words]
    ratios = [s.ratio for s in samples if s.ratio is not None]
    return Calibration(
        mix=mix,
        sentence_map=Isotonic.fit(raw, chrfs),
        word_logistic=logistic(word_x, word_y) if word_x and 0 < sum(word_y) < len(word_y) else None,
        length_ratio=[quantile(ratios, 0.005), quantile(ratios, 0.995)] if ratios else [0.3, 3.0],
        fitted_on=fitted_on,
    )


# ----------------------------------------------------------------------------- words
@dataclass
class WordConfidence:
    """An output word (as SentencePiece writes it, between spaces) and its confidence."""

    word: str
    confidence: float


def word_log_probs(pieces: list[str], log_probs: list[float]) -> list[tuple[str, float]]:
    """Output words and their pieces' mean log-probability; ``pieces`` in reading order with their
    ``log_probs`` (EOS left out); a word starts at a piece beginning with "▁"."""
    words: list[list] = []
    for piece, lp in zip(pieces, log_probs):
        if piece.startswith("▁") or not words:
            words.append([piece.lstrip("▁"), [lp]])
        else:
            words[-1][0] += piece
            words[-1][1].append(lp)
    return [(w, sum(lps) / len(lps)) for w, lps in words if w]


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rank correlation (ties get their mean rank)."""

    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r

    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    sy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return cov / (sx * sy) if sx and sy else 0.0
