"""Data preparation: the `nmt prepare` pipeline (section 5.1 of the paper) and its report.

Pipeline, streaming throughout (memory does not grow with the corpus):
  1. read:  plain or .gz UTF-8 files, one sentence per line, aligned by line
            (`nmt.data.lines.read_pairs`);
  2. clean: strip, control characters inside a line to spaces, Unicode NFC on every split
            (`nmt.data.lines.clean_split`, as `clean_line`; counted per sentence in the report);
            train only: drop empty pairs; valid and test are never filtered or reordered (an empty
            line stays an empty example);
  3. vocab: one SentencePiece BPE model shared by both languages, trained on the cleaned train
            split only (sampled to `input_sentence_size` lines with a fixed seed), or an earlier
            one reused (`nmt.data.bpe`; a checkpoint's with its target_spm.model, which then
            encodes the target side);
  4. encode: train only: drop pairs longer than `max_len` pieces or with a length ratio above
            `max_ratio`; write ids incrementally (`nmt.data.binarize`, which also writes the
            BPE-dropout segmentations).

The prepared directory holds everything later steps need; its layout, and the reader training
uses, are in nmt.data.dataset. Everything is written to a temporary folder next to the output and
renamed at the end, so an error leaves nothing half-written.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..atomic import fsync_files, replace_dir, restore_aside, sha256_file
from ..vocab import BOS, EOS, PAD, SPECIAL_IDS, TARGET_SPM, UNK, target_tag
from .binarize import BPEDropout, binarize, binarize_samples
from .bpe import character_coverage, default_vocab_size, is_cjk, reuse_spm, train_spm
from .case_augment import augment_case
from .download import DataError
from .lines import clean_split

SPLITS = ("train", "valid", "test")
DATASETS = ("multi30k", "wmt14", "wmt17-zh-en", "libreoffice", "files")
META_VERSION = 1

__all__ = ["DATASETS", "SPLITS", "PrepareOptions", "format_report", "prepare"]


# ------------------------------------------------------------------------------- preparing
@dataclass(frozen=True)
class PrepareOptions:
    """The recipe; stored verbatim in meta.json["recipe"]."""

    dataset: str
    src_lang: str
    tgt_lang: str
    vocab_size: int | None = None  # None: nmt.data.bpe.DEFAULT_VOCAB, or by train size for `files`
    max_len: int = 250  # train only: max pieces per side (without EOS/BOS)
    max_ratio: float = 9.0  # train only: max(len)/min(len) in pieces (Moses default)
    character_coverage: float | None = None  # None: 0.9995 with a CJK language, else 1.0
    input_sentence_size: int = 1_000_000  # SentencePiece training sample (sentences, both sides);
    # bounds prepare's peak memory (~0.6 GiB at 1M sentences of synthetic text)
    seed: int = 0
    threads: int = 2
    shuffle_train: bool = False  # shuffle train pairs (from `seed`) before BPE and
    # binarizing: for corpora stored in document order (libreoffice); holds train in memory
    # not in the paper: BPE-dropout (Provilkov et al., 2020). Besides the usual train encoding,
    # write `bpe_dropout_copies` encodings of the same kept pairs in which each merge is skipped
    # with probability `bpe_dropout`; training cycles through them, one per epoch.
    bpe_dropout: float = 0.0
    bpe_dropout_copies: int = 0
    # reuse this SentencePiece model (an earlier prepare's spm.model) instead of learning one: the
    # same vocabulary id for id, so that models trained on either data set can be ensembled or one
    # fine-tuned on the other (knowledge distillation, back-translation)
    spm_model: str | None = None
    # one model for several target languages (nmt.data.multilingual): the targets, whose tags
    # (>>de<<, nmt.vocab.target_tag) open the source sentences and are user-defined pieces
    tgt_langs: tuple[str, ...] = ()
    # not in the paper: this share of train pairs rewritten in ALL CAPS or Title Case, both sides
    # (nmt.data.case_augment; Marian's --all-caps-every, OpusTrainer's UpperCase / TitleCase)
    case_augment: float = 0.0


def prepare(
    splits: dict[str, tuple[Path, Path]],
    out: str | Path,
    *,
    options: PrepareOptions,
    downloads: dict | None = None,
    sources: dict | None = None,
    force: bool = False,
    log=print,
) -> dict:
    """Clean, learn the vocabulary, binarize; write `out` atomically; return its meta dict.
    ``sources``: what the splits gathered from several inputs or translation memories were made of
    (nmt.data.memories.gather_split; meta.json["sources"])."""
    out = Path(os.path.abspath(out))  # a name to rename: `--out .` or `..` (renaming "." is EBUSY)
    done = restore_aside(out)  # a prepare killed inside its swap: the previous data comes back
    if done:
        log(f"cleaned up after a killed `nmt prepare` in {out.parent}: {', '.join(done)}")
    _remove_stale_temporaries(out)
    if out.exists() and not (force or (out.is_dir() and not any(out.iterdir()))):
        raise DataError(f"{out} already exists; pass --force to replace it")
    if "train" not in splits:
        raise DataError("a training split is required (the vocabulary is learned from it)")
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    except OSError as e:  # under a file, no permission
        raise DataError(f"--out {out}: cannot create it ({e})") from e
    try:
        try:
            meta = _prepare_into(
                tmp, splits, options=options, downloads=downloads or {}, sources=sources, log=log
            )
            fsync_files(tmp)  # on disk before the swap: a crash never leaves a renamed, unwritten folder
            replace_dir(tmp, out)  # an existing DIR is renamed aside first, removed once the new one is in
        except OSError as e:  # a full disk, a file system error (unreadable inputs are DataErrors already)
            raise DataError(
                f"{out}: preparing it failed: {e} (nothing was written; {out} is as it was)"
            ) from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return meta


def _remove_stale_temporaries(out: Path) -> None:
    """Remove ``.OUT.tmp-PID`` folders left by a killed `nmt prepare` (its PID no longer runs)."""
    for p in out.parent.glob(f".{out.name}.tmp-*"):
        pid = p.name.rsplit("-", 1)[1]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # still running: another prepare is writing it
        except ProcessLookupError:
            shutil.rmtree(p, ignore_errors=True)
        except PermissionError:  # a live process of another user
            continue


def _prepare_into(
    tmp: Path, splits: dict, *, options: PrepareOptions, downloads: dict, sources: dict | None, log
) -> dict:
    """The pipeline of the module docstring, written into the empty folder ``tmp``: clean every
    split, learn (or reuse) the vocabulary on the cleaned train text, encode, write meta.json."""
    clock = time.perf_counter()
    inputs = {
        s: {side: {"path": str(p), "sha256": _input_sha256(p)} for side, p in zip(("src", "tgt"), paths)}
        for s, paths in splits.items()
    }
    cleaning, text_files = _clean_splits(tmp, splits, options=options, log=log)
    log(f"cleaned in {time.perf_counter() - clock:.1f}s")
    n_train = cleaning["train"]["kept"]
    if n_train == 0:
        raise DataError("no training pairs left after cleaning")
    vocab = _vocabulary(tmp, text_files["train"], n_train=n_train, options=options, log=log)
    clock = time.perf_counter()
    encoded = _encode_splits(tmp, text_files, cleaning, vocab=vocab, options=options, log=log)
    log(f"encoded in {time.perf_counter() - clock:.1f}s")
    meta = {
        "format": "nmt-prepared-data",
        "version": META_VERSION,
        "dataset": options.dataset,
        "src_lang": options.src_lang,
        "tgt_lang": options.tgt_lang,
        **({"tgt_langs": list(options.tgt_langs)} if options.tgt_langs else {}),
        "vocab_size": vocab.sp.get_piece_size(),
        "dtype": vocab.dtype,
        "special_ids": SPECIAL_IDS,
        "splits": encoded.splits,
        "cleaning": cleaning,
        "inputs": inputs,
        "downloads": downloads,
        "spm": {k: v for k, v in vocab.record.items() if k != "num_threads"},
        "recipe": asdict(options),
    }
    if encoded.samples is not None:
        meta["train_samples"] = encoded.samples
    if sources:
        meta["sources"] = sources
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    return meta


def _input_sha256(path: Path) -> str:
    """The sha256 of an input file (meta.json["inputs"]); DataError naming it if it cannot be read."""
    try:
        return sha256_file(path)
    except OSError as e:  # missing, unreadable, a path through a file
        raise DataError(f"cannot read {path}: {e}") from e


def _clean_splits(
    tmp: Path, splits: dict, *, options: PrepareOptions, log
) -> tuple[dict[str, dict], dict[str, tuple[Path, Path]]]:
    """Step 2 for every split: the cleaning counts and the cleaned text files of each split (train:
    temporary, the input of SentencePiece and of the encoder, shuffled if asked; valid and test:
    the references kept in the prepared directory)."""
    o = options
    cleaning, text_files = {}, {}
    for split, (src_path, tgt_path) in splits.items():
        if split == "train":  # cleaned train text is temporary: spm input + encoder input
            files = (tmp / "train.clean.src", tmp / "train.clean.tgt")
        else:
            files = (tmp / f"{split}.{o.src_lang}.txt", tmp / f"{split}.{o.tgt_lang}.txt")
        cleaning[split] = clean_split(src_path, tgt_path, files, drop_empty=split == "train")
        if split == "train" and o.shuffle_train:
            _shuffle_pairs(files, seed=o.seed)
        if split == "train" and o.case_augment > 0:
            cleaning[split]["case_augmented"] = augment_case(files, fraction=o.case_augment, seed=o.seed)
        text_files[split] = files
        log(f"{split}: read {cleaning[split]['read']} pairs from {src_path}, {tgt_path}")
    return cleaning, text_files


@dataclass(frozen=True)
class _Vocabulary:
    """The shared SentencePiece model of a prepared directory and how it was made."""

    sp: object  # sentencepiece.SentencePieceProcessor
    record: dict  # the SentencePiece options (or where it was reused from): meta.json["spm"]
    # the target side's own model on the same ids (a reused checkpoint's target_spm.model); None: sp
    tgt_sp: object = None

    @property
    def dtype(self) -> str:
        """The id type of the .bin files: uint16 if every id fits, else int32."""
        return "uint16" if self.sp.get_piece_size() <= 1 << 16 else "int32"


def _vocabulary(
    tmp: Path, train_files: tuple[Path, Path], *, n_train: int, options: PrepareOptions, log
) -> _Vocabulary:
    """Step 3: the --spm-model reused, or one BPE model learned on the cleaned train text (both
    sides), written to tmp/spm.model and tmp/spm.vocab."""
    o = options
    clock = time.perf_counter()
    if o.spm_model is not None:
        sp, tgt_sp, record = reuse_spm(Path(o.spm_model), tmp / "spm")
        missing = [target_tag(t) for t in o.tgt_langs if sp.piece_to_id(target_tag(t)) == sp.unk_id()]
        if missing:
            raise DataError(f"--spm-model {o.spm_model}: no piece {', '.join(missing)} (the target tags)")
        target = "" if tgt_sp is None else f" (targets with its {TARGET_SPM})"
        log(f"vocabulary of {sp.get_piece_size()} reused from {o.spm_model}{target}")
        return _Vocabulary(sp, record, tgt_sp)
    record = dict(
        model_type="bpe",
        vocab_size=o.vocab_size or default_vocab_size(o.dataset, n_train),
        character_coverage=o.character_coverage or character_coverage((o.src_lang, o.tgt_lang)),
        pad_id=PAD,
        unk_id=UNK,
        bos_id=BOS,
        eos_id=EOS,
        # we normalize (NFC) ourselves, so decode(encode(x)) == x for covered text
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        input_sentence_size=o.input_sentence_size,
        shuffle_input_sentence=True,
        hard_vocab_limit=False,
        num_threads=o.threads,
    )
    if o.tgt_langs:  # each tag one piece, wherever it stands
        record["user_defined_symbols"] = [target_tag(lang) for lang in o.tgt_langs]
    sp = train_spm(list(train_files), tmp / "spm", seed=o.seed, **record)
    log(f"vocabulary of {sp.get_piece_size()} learned in {time.perf_counter() - clock:.1f}s")
    return _Vocabulary(sp, record)


@dataclass(frozen=True)
class _Encoded:
    """What step 4 wrote: meta.json's "splits" (counts per split) and "train_samples" (the
    BPE-dropout segmentations; None without --bpe-dropout)."""

    splits: dict[str, dict]
    samples: dict | None


def _encode_splits(
    tmp: Path,
    text_files: dict[str, tuple[Path, Path]],
    cleaning: dict[str, dict],
    *,
    vocab: _Vocabulary,
    options: PrepareOptions,
    log,
) -> _Encoded:
    """Step 4 for every split, in the order they were given; updates ``cleaning`` with what the
    length filter dropped (train) and the pairs longer than --max-len (valid, test)."""
    split_meta, samples = {}, None
    for split, files in text_files.items():
        if split == "train":
            split_meta[split], samples = _encode_train(
                tmp, files, cleaning["train"], vocab=vocab, options=options, log=log
            )
        else:
            split_meta[split] = _encode_reference(
                tmp, split, files, cleaning[split], vocab=vocab, options=options, log=log
            )
    return _Encoded(split_meta, samples)


def _encode_train(
    tmp: Path, files: tuple[Path, Path], cleaning: dict, *, vocab: _Vocabulary, options: PrepareOptions, log
) -> tuple[dict, dict | None]:
    """The train split's ids, without the pairs beyond --max-len / --max-ratio (counted in
    ``cleaning``), and its BPE-dropout segmentations if asked; the cleaned text is removed."""
    o = options
    counts = _binarize(vocab, files, tmp / "train", limits=(o.max_len, o.max_ratio), options=o)
    counts.pop("longer")
    keep = counts.pop("keep")
    cleaning["dropped"].update(counts.pop("dropped"))
    cleaning["kept"] = counts["pairs"]
    if counts["pairs"] == 0:
        raise DataError(f"no training pairs left after --max-len {o.max_len} and --max-ratio {o.max_ratio}")
    counts["src_words"] = source_words(files[0], keep, src_lang=o.src_lang)
    samples = None
    if o.bpe_dropout > 0 and o.bpe_dropout_copies > 0:
        samples = binarize_samples(
            vocab.sp,
            files,
            tmp,
            BPEDropout(p=o.bpe_dropout, copies=o.bpe_dropout_copies, seed=o.seed),
            keep=keep,
            max_len=o.max_len,
            dtype=np.dtype(vocab.dtype),
            tgt_sp=vocab.tgt_sp,
        )
        log(
            f"train: {o.bpe_dropout_copies} BPE-dropout segmentations (p={o.bpe_dropout}): "
            f"{np.mean(samples['tgt_tokens']) / counts['tgt_tokens']:.2f}x the target pieces"
        )
    for f in files:
        f.unlink()
    return counts, samples


def source_words(src_file: Path, keep: np.ndarray | None, *, src_lang: str) -> dict | None:
    """The kept training sources' lengths in words (runs of non-space characters, as
    nmt.realtext.segment counts them): ``longest`` and ``p99`` (the 99th percentile). Real-text
    translation cuts a sentence longer than any the model learned from into parts of at most p99
    words (nmt.realtext.job). None for a source written without spaces between words (zh, ja,
    ko), where words cannot be counted so."""
    if is_cjk(src_lang):
        return None
    with open(src_file, encoding="utf-8") as f:
        words = np.array([len(line.split()) for line in f], dtype=np.int64)
    if keep is not None:
        words = words[keep]
    if not len(words):
        return None
    return {"longest": int(words.max()), "p99": int(np.percentile(words, 99, method="higher"))}


def _encode_reference(
    tmp: Path,
    split: str,
    files: tuple[Path, Path],
    cleaning: dict,
    *,
    vocab: _Vocabulary,
    options: PrepareOptions,
    log,
) -> dict:
    """A valid or test split's ids, every pair kept (its cleaned text stays beside them, the
    references of BLEU); pairs longer than --max-len are counted in ``cleaning`` and warned of."""
    o = options
    counts = _binarize(vocab, files, tmp / split, limits=None, options=o)
    longer = counts.pop("longer")
    counts.pop("keep")
    counts.pop("dropped")
    counts["text"] = [f.name for f in files]
    cleaning["longer_than_max_len"] = longer
    if longer:  # kept (valid/test are never filtered); a model with fewer positions truncates them
        log(
            f"warning: {split}: {longer} pairs have a side longer than --max-len {o.max_len} "
            "pieces (kept; validation and translation truncate them to the model's positions)"
        )
    return counts


def _binarize(
    vocab: _Vocabulary, files: tuple[Path, Path], prefix: Path, *, limits, options: PrepareOptions
) -> dict:
    """nmt.data.binarize.binarize with this preparation's vocabulary, id type and threads."""
    return binarize(
        vocab.sp,
        files,
        prefix,
        dtype=np.dtype(vocab.dtype),
        limits=limits,
        threads=options.threads,
        warn_len=options.max_len,
        tgt_sp=vocab.tgt_sp,
    )


def _shuffle_pairs(files: tuple[Path, Path], *, seed: int) -> None:
    """Permute the aligned lines of two text files in place, the same seeded order for both."""
    sides = [f.read_text(encoding="utf-8").split("\n")[:-1] for f in files]
    order = np.random.default_rng(seed).permutation(len(sides[0]))
    for f, lines in zip(files, sides):
        f.write_text("".join(lines[i] + "\n" for i in order), encoding="utf-8", newline="\n")


# ------------------------------------------------------------------------------- command line
def format_report(meta: dict) -> str:
    """A short table of what cleaning did per split."""
    lines = [
        f"{meta['src_lang']}-{meta['tgt_lang']}: vocabulary {meta['vocab_size']} "
        f"(BPE, shared, character coverage {meta['spm']['character_coverage']}), "
        f"ids {meta['dtype']}",
        f"{'split':<6} {'read':>9} {'kept':>9} {'src tok':>11} {'tgt tok':>11}  notes",
    ]
    for split, c in meta["cleaning"].items():
        s = meta["splits"][split]
        notes = [f"dropped {k} {v}" for k, v in c["dropped"].items() if v]
        notes += [
            f"{k.replace('_', ' ')} {c[k]}"
            for k in ("empty_kept", "stripped", "control_chars", "nfc_changed", "longer_than_max_len")
            if c.get(k)
        ]
        lines.append(
            f"{split:<6} {c['read']:>9} {c['kept']:>9} {s['src_tokens']:>11} "
            f"{s['tgt_tokens']:>11}  {', '.join(notes)}"
        )
    if "train_samples" in meta:
        ts = meta["train_samples"]
        n = len(ts["splits"])
        lines.append(
            f"train: {n} BPE-dropout segmentations (p={ts['bpe_dropout']}), on average "
            f"{sum(ts['src_tokens']) / n:,.0f} source / {sum(ts['tgt_tokens']) / n:,.0f} "
            "target pieces"
        )
    return "\n".join(lines)
