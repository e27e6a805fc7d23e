"""Vocabulary shortlists: score only the target pieces a batch's source makes likely.

Most of a decoding step's output layer goes to pieces the sentence will never use. A shortlist
(Marian's lexical shortlist, Sockeye's top-k lexicon, CTranslate2's vocabulary map) lists, for
each source piece, the target pieces worth scoring; a batch is searched over the union of the
lists of its source pieces and of the most frequent target pieces.

Built by ``nmt shortlist DATA --out FILE`` from a prepared corpus's training pairs:
  * statistic: IBM Model 1 lexical translation probabilities p(t | s) (Brown et al. 1993), i.e.
    sentence-level co-occurrence counts re-weighted by expectation-maximisation (``iterations``
    EM passes from uniform, with a NULL source word), as fast_align's lexical table that Marian
    and Sockeye read, without its diagonal prior. Each source piece keeps its ``best`` target
    pieces by p(t | s) above ``threshold`` (Marian's ``best``, Sockeye's k), and with
    ``identity`` itself (Marian's ``shared``: a piece copied from the source; off by default:
    a piece that is copied in the training pairs is among its own candidates already);
  * ``frequent``: the most frequent target pieces of the training targets (Marian's ``first``;
    SentencePiece ids are not in frequency order, so they are counted), always scored.
Special ids are never listed: PAD, UNK, BOS and EOS are always in the union.

A checkpoint may carry its own shortlist, ``shortlist.txt`` beside its weights (``of_checkpoint``;
`nmt distill` writes its student's there): `nmt translate`, `nmt serve` and ``Translator.load``
search with it unless told otherwise (``--no-shortlist``, ``shortlist=False``). A sentence with
constraints or glossary terms is searched over the full vocabulary, apart from the others
(nmt.infer.translate.Translator.search_sources): a phrase's pieces need not be in any union.

Used by ``nmt translate --shortlist FILE`` / ``Translator.load(..., shortlist=FILE)``. By default
(scope "sentence", ``SCOPES``) each sentence is searched over its own list U: PAD, UNK, BOS, EOS,
the frequent pieces, the lists of its source pieces and its prefix's pieces (``restrict_rows``), so
that its translation does not depend on the sentences batched with it, and a step scores ~150 pieces
a sentence instead of a batch's ~2,000; with scope "batch" (``--shortlist-scope batch``, Marian's
and CTranslate2's way) a batch is searched over the union U (ascending ids) of PAD, UNK, BOS, EOS,
the frequent pieces, the lists of the batch's source pieces and any prefix's pieces. The search runs
over U: the output projection's rows U only (a copy per batch; packed float32 and int8 layers stay
packed / int8), the next-token log-probabilities are ``log_softmax`` over U (normalised over the
shortlist, as Marian and CTranslate2 do; a piece outside U has probability 0), and the chosen
positions are mapped back to ids. U starts with the four special ids, so they keep their ids inside
U and the search's rules (PAD and BOS never chosen, EOS last) apply unchanged. Where U is the whole
vocabulary the model runs unchanged (outputs equal the full vocabulary's bit for bit). With scope
"batch" and ``union_groups`` (one group per request in ``nmt serve``) each sentence is searched
over its group's union instead, whatever batch it shares (``group_keeps``, ``restrict_rows``;
nmt.infer.vocab_restriction).

File format (UTF-8 text, one record a line, ids in the SentencePiece model's numbering):
    nmt-shortlist<TAB>1<TAB>{"vocab_size": W, "spm_sha256": ..., "statistic": ..., ...}
    frequent<TAB>ID ID ...
    SOURCE_ID<TAB>ID ID ...          (one line per source piece with a list)
``vmap_text`` renders it as CTranslate2's vocabulary map (pieces instead of ids, the frequent
pieces under the empty source n-gram): ``nmt shortlist ... --ctranslate2 DIR`` writes DIR/vmap.txt,
which ``translate_batch(..., use_vmap=True)`` reads; CTranslate2 adds UNK, BOS and EOS itself, so
both engines choose among the same pieces.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..atomic import write_text
from ..errors import UserError
from ..vocab import BOS, EOS, PAD, UNK
from .vocab_restriction import Restriction, batch_model, sentence_model

SPECIAL = (PAD, UNK, BOS, EOS)  # always scored; ascending, so they keep their ids inside the union
# what each sentence is searched over: "sentence", its own list (the special ids, the frequent pieces,
# the lists of its source pieces): its translation does not depend on the sentences batched with
# it; "batch", the union of its batch's lists, as Marian's shortlists and CTranslate2's vocabulary
# map do (nmt serve: the union of its request's sentences)
SCOPES = ("sentence", "batch")
CHECKPOINT_FILE = "shortlist.txt"  # a checkpoint's own shortlist, beside its weights


def of_checkpoint(checkpoint: str | Path) -> Path | None:
    """The shortlist a checkpoint (or a run directory's checkpoint) carries, CHECKPOINT_FILE beside
    its weights, or that an `nmt export ctranslate2` directory carries (beside its vmap.txt); None
    where it has none or ``checkpoint`` is neither."""
    from .. import checkpoint as ckpt

    export = Path(checkpoint)
    if (export / "nmt_export.json").is_file():
        return export / CHECKPOINT_FILE if (export / CHECKPOINT_FILE).is_file() else None
    try:
        path = ckpt.resolve_checkpoint(checkpoint) / CHECKPOINT_FILE
    except ckpt.CheckpointError:
        return None
    return path if path.is_file() else None


MAGIC = "nmt-shortlist"
VERSION = 1


class ShortlistError(UserError):
    """A bad shortlist file or option; the message names the file (and line)."""


@dataclass
class Shortlist:
    """Per source id, the target ids worth scoring, plus the ids always scored."""

    vocab_size: int  # W: ids are 0..W-1, source and target (one shared vocabulary)
    frequent: list[int]  # most frequent target ids, always scored (ascending)
    candidates: dict[int, list[int]]  # source id -> target ids (ascending), no special ids
    spm_sha256: str = ""  # sha256 of the SentencePiece model the ids belong to ("": not checked)
    info: dict = field(default_factory=dict)  # how it was built (statistic, options, data)
    scope: str = "sentence"  # one of SCOPES: each sentence over its own list, or its batch's union
    _tables: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise ShortlistError(f"shortlist scope {self.scope!r}: choose from {', '.join(SCOPES)}")

    def tables(self, device: torch.device) -> tuple[Tensor, Tensor]:
        """(W, K) target ids of each source id padded with -1, and (W,) bool: always scored."""
        key = str(device)
        if key not in self._tables:
            width = max((len(v) for v in self.candidates.values()), default=0)
            table = torch.full((self.vocab_size, max(width, 1)), -1, dtype=torch.long)  # (W, K)
            for s, ts in self.candidates.items():
                table[s, : len(ts)] = torch.tensor(ts, dtype=torch.long)
            base = torch.zeros(self.vocab_size, dtype=torch.bool)  # (W,)
            base[list(SPECIAL) + list(self.frequent)] = True
            self._tables[key] = (table.to(device), base.to(device))
        return self._tables[key]

    def keep(self, src_tokens: Tensor, prefix: list[list[int]] | None = None) -> Tensor:
        """(W,) True on the union of ``src_tokens`` (any shape; padding included: PAD has no list):
        the special ids, the frequent pieces, the lists of its pieces and the ``prefix`` ids."""
        table, base = self.tables(src_tokens.device)
        keep = base.clone()  # (W,)
        cand = table[src_tokens.unique()].flatten()  # (n * K,)
        keep[cand[cand.ge(0)]] = True
        forced = [t for p in prefix or [] for t in p]
        if forced:
            keep[torch.tensor(forced, device=keep.device)] = True
        return keep

    def rows(self, src_tokens: Tensor, prefix: list[list[int]] | None = None) -> Tensor:
        """The union U (ascending target ids, (U,)) for a batch ``src_tokens`` (B, S) and the target
        ``prefix`` ids of its sentences."""
        return self.keep(src_tokens, prefix).nonzero().squeeze(1)  # (U,)

    def restrict(self, model, src_tokens: Tensor, prefix: list[list[int]] | None = None) -> Restriction:
        """``model`` (a Transformer or an nmt.infer.search.Ensemble of them) for the batch
        ``src_tokens``: searched over the batch's union, or unchanged where that is every id."""
        rows = self.rows(src_tokens, prefix)
        if rows.numel() >= self.vocab_size:
            return Restriction(model, None)
        return Restriction(batch_model(model, rows), [rows.tolist()] * src_tokens.size(0))

    def restrict_rows(self, model, keeps: Tensor) -> Restriction:
        """``model`` for a batch whose sentence i is searched over its own ids ``keeps[i]`` ((B, W)
        bool, e.g. the union of its request: ``group_keeps``), whatever the other sentences hold."""
        counts = keeps.sum(dim=1)  # (B,)
        width = int(counts.max())
        if int(counts.min()) >= self.vocab_size:  # every sentence over every id: the model unchanged
            return Restriction(model, None)
        kept = keeps.nonzero()  # (n, 2) sentence, id: row by row, ids ascending
        starts = counts.cumsum(0) - counts  # (B,) where each sentence's ids begin in ``kept``
        ids = torch.zeros(keeps.size(0), width, dtype=torch.long, device=keeps.device)  # (B, U)
        ids[kept[:, 0], torch.arange(kept.size(0), device=keeps.device) - starts[kept[:, 0]]] = kept[:, 1]
        valid = torch.arange(width, device=ids.device)[None, :] < counts[:, None]  # (B, U)
        lists = [r[:c] for r, c in zip(ids.tolist(), counts.tolist())]
        return Restriction(sentence_model(model, ids, valid), lists)

    def sentence_keeps(
        self, sources: list[list[int]], prefix: list[list[int]] | None, device: torch.device
    ) -> Tensor:
        """(B, W) True on each source's own union (``keep`` of each, at once): the special ids,
        the frequent pieces, the lists of its pieces and its ``prefix`` ids."""
        table, base = self.tables(device)
        width = max(map(len, sources), default=0)
        src = torch.tensor([s + [PAD] * (width - len(s)) for s in sources], dtype=torch.long, device=device)
        cand = table[src].flatten(1)  # (B, S*K) target ids of each source piece, -1 padding
        keep = base.expand(len(sources), -1).clone()  # (B, W)
        keep.scatter_(1, cand.clamp(min=PAD), True)  # -1 -> PAD, kept anyway (special)
        for i, forced in enumerate(prefix or []):
            if forced:
                keep[i, torch.tensor(forced, device=device)] = True
        return keep

    def group_keeps(
        self, sources: list[list[int]], groups: list, prefix: list[list[int]] | None, device: torch.device
    ) -> list[Tensor]:
        """Per source, the (W,) union of every source of its group (``groups[i]``: any hashable;
        the sentences of one request) and their ``prefix`` ids: shared by the group's sentences
        whichever search batches they fall in."""
        members: dict = {}
        for i, g in enumerate(groups):
            members.setdefault(g, []).append(i)
        keeps = {}
        for g, rows in members.items():
            ids = torch.tensor(
                [t for i in rows for t in sources[i]] or [PAD], dtype=torch.long, device=device
            )
            keeps[g] = self.keep(ids, None if prefix is None else [prefix[i] for i in rows])
        return [keeps[g] for g in groups]


# ----------------------------------------------------------------------------- building
@dataclass
class BuildOptions:
    best: int = 10  # target pieces kept per source piece (by p(t|s))
    frequent: int = 100  # most frequent target pieces, always scored
    threshold: float = 0.0  # keep p(t|s) > threshold only
    iterations: int = 5  # EM passes of IBM Model 1
    identity: bool = False  # each source piece lists itself too (shared vocabulary: copies)
    max_sentences: int = 1_000_000  # the first N training pairs (prepare shuffles them)
    chunk: int = 8192  # sentences per vectorised pass (memory)


def _read_side(data_dir: Path, split: str, side: str, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """All ids of a split's side back to back and the offsets (see nmt.data.dataset)."""
    offsets = np.load(data_dir / f"{split}.{side}.offsets.npy")  # (n + 1,) int64
    path = data_dir / f"{split}.{side}.bin"
    ids = np.zeros(0, dtype) if path.stat().st_size == 0 else np.memmap(path, dtype=dtype, mode="r")
    return np.asarray(ids, dtype=np.int64), offsets.astype(np.int64)


def _pairs(
    src: np.ndarray,
    src_off: np.ndarray,
    tgt: np.ndarray,
    tgt_off: np.ndarray,
    lo: int,
    hi: int,
    null: int,
    vocab: int,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Every (source piece or NULL, target position) pair of sentences lo..hi-1: the pair keys
    s * W + t (P,), the chunk-local target position of each pair (P,), the chunk's target count."""
    ls = np.diff(src_off[lo : hi + 1]) + 1  # (n,) source pieces + NULL
    lt = np.diff(tgt_off[lo : hi + 1])  # (n,)
    count = ls * lt  # (n,) pairs per sentence
    total = int(count.sum())
    start = np.cumsum(count) - count  # (n,)
    r = np.arange(total) - np.repeat(start, count)  # (P,) index inside its sentence
    width = np.repeat(lt, count)  # (P,)
    i, j = r // width, r % width  # (P,) source position, target position
    last = np.repeat(ls - 1, count)  # (P,) the NULL position
    src_pos = np.minimum(np.repeat(src_off[lo:hi], count) + i, len(src) - 1)  # (P,) clipped for NULL
    s = np.where(i == last, null, src[src_pos] if len(src) else null)  # (P,)
    t_pos = np.repeat(tgt_off[lo:hi] - tgt_off[lo], count) + j  # (P,) chunk-local target position
    t = tgt[tgt_off[lo] + t_pos]  # (P,)
    return s * vocab + t, t_pos, int(tgt_off[hi] - tgt_off[lo])


def ibm1(
    src: np.ndarray,
    src_off: np.ndarray,
    tgt: np.ndarray,
    tgt_off: np.ndarray,
    *,
    vocab: int,
    iterations: int,
    chunk: int,
    log=None,
) -> tuple[np.ndarray, np.ndarray]:
    """IBM Model 1 p(t | s) by EM over the sentence pairs (source side with a NULL word, id
    ``vocab``), from uniform: returns the co-occurring pairs' keys s * W + t (ascending) and
    p(t | s) for each. One pass: every target piece's expected alignment to each source piece of
    its sentence, p(t|s) / sum over the sentence's s' of p(t|s'), summed per pair and
    normalised per source piece."""
    n = len(src_off) - 1
    spans = [(lo, min(lo + chunk, n)) for lo in range(0, n, chunk)]
    keys = np.zeros(0, np.int64)
    for lo, hi in spans:  # the distinct pairs that co-occur
        keys = np.union1d(keys, np.unique(_pairs(src, src_off, tgt, tgt_off, lo, hi, vocab, vocab)[0]))
    prob = np.ones(len(keys))  # uniform start (any constant: the first pass gives co-occurrence shares)
    source_of = keys // vocab  # (K,)
    for it in range(iterations):
        counts = np.zeros(len(keys))
        for lo, hi in spans:
            key, t_pos, n_tgt = _pairs(src, src_off, tgt, tgt_off, lo, hi, vocab, vocab)
            idx = np.searchsorted(keys, key)  # (P,)
            p = prob[idx]
            denom = np.bincount(t_pos, p, minlength=n_tgt)  # (targets,) sum over the sentence's sources
            counts += np.bincount(idx, p / denom[t_pos], minlength=len(keys))
        total = np.bincount(source_of, counts, minlength=vocab + 1)  # (W + 1,)
        prob = counts / total[source_of]
        if log is not None:
            log(f"EM pass {it + 1}/{iterations} done")
    return keys, prob


def build(data_dir: str | Path, options: BuildOptions = BuildOptions(), *, log=None) -> Shortlist:
    """The shortlist of a prepared corpus (``nmt prepare`` output): see the module docstring."""
    data_dir = Path(data_dir)
    check_options(options)
    vocab, src, src_off, tgt, tgt_off = _training_pairs(data_dir, options.max_sentences)
    start = time.perf_counter()
    keys, prob = ibm1(
        src, src_off, tgt, tgt_off, vocab=vocab, iterations=options.iterations, chunk=options.chunk, log=log
    )
    candidates = _best_targets(keys, prob, vocab=vocab, options=options)
    freq = np.bincount(tgt, minlength=vocab)  # (W,)
    freq[list(SPECIAL)] = -1
    top = np.argsort(-freq, kind="stable")[: options.frequent]
    frequent = sorted(int(t) for t in top if freq[t] > 0)
    spm = data_dir / "spm.model"
    info = {
        "statistic": "ibm1",
        "data": str(data_dir),
        "sentences": len(src_off) - 1,
        "seconds": round(time.perf_counter() - start, 1),
        **{k: v for k, v in dataclasses.asdict(options).items() if k != "chunk"},
    }
    return Shortlist(
        vocab,
        frequent,
        {s: sorted(ts) for s, ts in sorted(candidates.items())},
        spm_sha256=hashlib.sha256(spm.read_bytes()).hexdigest() if spm.is_file() else "",
        info=info,
    )


def check_options(options: BuildOptions) -> None:
    """ShortlistError naming the option (as `nmt shortlist` spells it) that is out of range."""
    for name, value in (
        ("best", options.best),
        ("frequent", options.frequent),
        ("iterations", options.iterations),
        ("max_sentences", options.max_sentences),
    ):
        if value < 0 or (name in ("iterations", "max_sentences") and value < 1):
            raise ShortlistError(
                f"--{name.replace('_', '-')} {value}: must be "
                f"{'>= 1' if name in ('iterations', 'max_sentences') else '>= 0'}"
            )


def _training_pairs(data_dir: Path, max_sentences: int):
    """The vocabulary size and the first ``max_sentences`` training pairs of a prepared corpus:
    source ids and offsets, target ids and offsets (as nmt.data.binarize writes them)."""
    from ..data.dataset import load_meta
    from ..data.download import DataError

    try:
        meta = load_meta(data_dir)
    except DataError as e:
        raise ShortlistError(str(e)) from None
    if "train" not in meta.get("splits", {}):
        raise ShortlistError(f"{data_dir}: no train split in meta.json")
    vocab = int(meta["vocab_size"])
    dtype = np.dtype(meta["dtype"])
    src, src_off = _read_side(data_dir, "train", "src", dtype)
    tgt, tgt_off = _read_side(data_dir, "train", "tgt", dtype)
    n = min(len(src_off) - 1, max_sentences)
    src_off, tgt_off = src_off[: n + 1], tgt_off[: n + 1]
    return vocab, src[: src_off[-1]], src_off, tgt[: tgt_off[-1]], tgt_off


def _best_targets(
    keys: np.ndarray, prob: np.ndarray, *, vocab: int, options: BuildOptions
) -> dict[int, set[int]]:
    """For each source piece its ``options.best`` most probable target pieces under IBM Model 1
    (``keys`` = source * vocab + target, ``prob`` = p(target | source)), above the threshold, no
    NULL and no special ids; with ``options.identity`` every non-special piece lists itself."""
    source, target = keys // vocab, keys % vocab  # (K,) each
    ok = (source < vocab) & (target >= len(SPECIAL)) & (prob > options.threshold)  # no NULL, no specials
    ok &= ~np.isin(source, SPECIAL)
    source, target, prob = source[ok], target[ok], prob[ok]
    order = np.lexsort((target, -prob, source))  # by source, then p(t|s) descending, then id
    source, target = source[order], target[order]
    first = np.searchsorted(source, source, side="left")  # (K',) where each source's run starts
    keep = np.arange(len(source)) - first < options.best  # rank within the source's run
    candidates: dict[int, set[int]] = {}
    for s, t in zip(source[keep].tolist(), target[keep].tolist()):
        candidates.setdefault(s, set()).add(t)
    if options.identity:  # every non-special piece lists itself (shared vocabulary)
        for s in range(len(SPECIAL), vocab):
            candidates.setdefault(s, set()).add(s)
    return candidates


# ----------------------------------------------------------------------------- the file


def dumps(shortlist: Shortlist) -> str:
    head = {"vocab_size": shortlist.vocab_size, "spm_sha256": shortlist.spm_sha256, **shortlist.info}
    lines = [
        f"{MAGIC}\t{VERSION}\t{json.dumps(head, sort_keys=True)}",
        "frequent\t" + " ".join(map(str, shortlist.frequent)),
    ]
    lines += [f"{s}\t{' '.join(map(str, ts))}" for s, ts in sorted(shortlist.candidates.items()) if ts]
    return "\n".join(lines) + "\n"


def save(shortlist: Shortlist, path: str | Path) -> Path:
    path = Path(path)
    if path.is_dir():
        raise ShortlistError(f"{path}: is a directory; --out takes a file name")
    if not path.parent.is_dir():
        raise ShortlistError(f"{path}: cannot write: folder {path.parent} does not exist")
    write_text(path, dumps(shortlist))
    return path


def _ids(text: str, where: str, vocab: int, *, special_ok: bool) -> list[int]:
    try:
        ids = [int(x) for x in text.split()]
    except ValueError:
        raise ShortlistError(f"{where}: expected ids separated by spaces, got {text[:60]!r}") from None
    bad = [i for i in ids if not (0 if special_ok else len(SPECIAL)) <= i < vocab]
    if bad:
        raise ShortlistError(
            f"{where}: id {bad[0]} outside {len(SPECIAL)}..{vocab - 1}"
            f"{'' if special_ok else ' (special ids are always scored, never listed)'}"
        )
    return sorted(set(ids))


def load(path: str | Path) -> Shortlist:
    """Read a shortlist file; ShortlistError naming the file and line for anything malformed."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ShortlistError(
            f"{path}: no such file (build one with `nmt shortlist DATA --out {path}`)"
        ) from None
    except UnicodeDecodeError as e:
        raise ShortlistError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    head = lines[0].split("\t", 2) if lines else []
    if len(head) != 3 or head[0] != MAGIC:
        raise ShortlistError(
            f"{path}:1: not an nmt shortlist (expected '{MAGIC}<TAB>{VERSION}<TAB>{{...}}'; "
            "build one with `nmt shortlist`)"
        )
    if head[1] != str(VERSION):
        raise ShortlistError(f"{path}:1: shortlist format version {head[1]}, this nmt reads {VERSION}")
    try:
        info = json.loads(head[2])
        vocab = int(info.pop("vocab_size"))
        sha = str(info.pop("spm_sha256", ""))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ShortlistError(f"{path}:1: bad header ({type(e).__name__}: {e})") from None
    if len(lines) < 2 or not lines[1].startswith("frequent\t"):
        raise ShortlistError(f"{path}:2: expected 'frequent<TAB>ID ID ...'")
    frequent = _ids(lines[1].split("\t", 1)[1], f"{path}:2", vocab, special_ok=False)
    candidates: dict[int, list[int]] = {}
    for n, line in enumerate(lines[2:], start=3):
        src, sep, rest = line.partition("\t")
        where = f"{path}:{n}"
        if not sep:
            raise ShortlistError(f"{where}: expected 'SOURCE_ID<TAB>ID ID ...', got {line[:60]!r}")
        if len(src.split()) != 1:
            raise ShortlistError(f"{where}: expected one source id before the tab, got {src!r}")
        (s,) = _ids(src, where, vocab, special_ok=True)
        if s in candidates:
            raise ShortlistError(f"{where}: source id {s} listed twice")
        candidates[s] = _ids(rest, where, vocab, special_ok=False)
    return Shortlist(vocab, frequent, candidates, spm_sha256=sha, info=info)


def check_model(shortlist: Shortlist, *, vocab_size: int, spm_sha256: str, source: str, model: str) -> None:
    """ShortlistError unless ``shortlist`` (read from ``source``) belongs to the model at ``model``:
    the same vocabulary size and (when recorded) the same SentencePiece model."""
    if shortlist.vocab_size != vocab_size:
        raise ShortlistError(
            f"{source}: built for a vocabulary of {shortlist.vocab_size} pieces, the model "
            f"{model} has {vocab_size}"
        )
    if shortlist.spm_sha256 and spm_sha256 and shortlist.spm_sha256 != spm_sha256:
        raise ShortlistError(
            f"{source}: built for another SentencePiece model than {model}'s (sha256 "
            f"{shortlist.spm_sha256[:12]}... against {spm_sha256[:12]}...): ids would not match; "
            "build it from the data the model was trained on"
        )


def for_translator(shortlist: "str | Path | Shortlist", sp, cfg) -> Shortlist:
    """A shortlist (or its file) checked against a model's configuration and SentencePiece model."""
    source = "shortlist" if isinstance(shortlist, Shortlist) else str(shortlist)
    if not isinstance(shortlist, Shortlist):
        shortlist = load(shortlist)
    sha = hashlib.sha256(sp.serialized_model_proto()).hexdigest()
    if cfg.src_vocab_size != cfg.tgt_vocab_size:
        raise ShortlistError(
            f"{source}: shortlists need one shared vocabulary (the model has "
            f"{cfg.src_vocab_size} source and {cfg.tgt_vocab_size} target pieces)"
        )
    check_model(shortlist, vocab_size=cfg.tgt_vocab_size, spm_sha256=sha, source=source, model="being loaded")
    return shortlist


# ----------------------------------------------------------------------------- CTranslate2
def vmap_text(shortlist: Shortlist, vocab: list[str]) -> str:
    """CTranslate2's vocabulary map of ``shortlist``: 'SOURCE<TAB>TARGET TARGET ...' per source
    piece, the frequent pieces under the empty source; ``vocab``: the pieces in id order."""
    if len(vocab) != shortlist.vocab_size:
        raise ShortlistError(f"vocabulary of {len(vocab)} pieces, the shortlist's has {shortlist.vocab_size}")
    lines = ["\t" + " ".join(vocab[t] for t in shortlist.frequent)]
    lines += [
        f"{vocab[s]}\t{' '.join(vocab[t] for t in ts)}"
        for s, ts in sorted(shortlist.candidates.items())
        if ts and s not in SPECIAL
    ]
    return "\n".join(lines) + "\n"


def write_vmap(shortlist: Shortlist, model_dir: str | Path) -> Path:
    """Write ``model_dir``/vmap.txt (a CTranslate2 model directory: `nmt export ctranslate2`),
    atomically; ShortlistError when the directory's vocabulary or spm.model is not the shortlist's."""
    model_dir = Path(model_dir)
    vocab_file = model_dir / "shared_vocabulary.json"
    if not (model_dir / "model.bin").is_file() or not vocab_file.is_file():
        raise ShortlistError(
            f"{model_dir}: not a CTranslate2 model directory with a shared vocabulary "
            "(model.bin, shared_vocabulary.json; see `nmt export ctranslate2`)"
        )
    vocab = json.loads(vocab_file.read_text(encoding="utf-8"))
    spm = model_dir / "spm.model"
    check_model(
        shortlist,
        vocab_size=len(vocab),
        source="shortlist",
        model=str(model_dir),
        spm_sha256=hashlib.sha256(spm.read_bytes()).hexdigest() if spm.is_file() else "",
    )
    out = model_dir / "vmap.txt"
    write_text(out, vmap_text(shortlist, vocab))
    return out
