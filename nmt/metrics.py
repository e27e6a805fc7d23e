"""Evaluation: sacreBLEU BLEU and chrF with their signatures (`nmt score`), and, opt-in, the
paper-era tokenized, compound-split BLEU.

sacreBLEU (Post, 2018) scores detokenized text with a fixed, reported tokenization; its
signature says exactly what was computed. The paper's 27.3 / 28.4 (EN-DE) are *tokenized* BLEU:
tensor2tensor's get_ende_bleu.sh tokenizes both sides (Moses tokenizer.perl), splits hyphenated
compounds with  perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'  and runs multi-bleu.perl.
`paper_bleu` reproduces that recipe with sacreBLEU's 13a tokenizer standing in for Moses (13a,
like Moses without -a, keeps a hyphen between letters attached, so the compound split applies),
the same regex, then BLEU on those tokens (tokenize='none', no smoothing, as multi-bleu.perl).
It is not comparable to sacreBLEU and is always printed with that label.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF

from .errors import UserError

PAPER_BLEU_LABEL = "tokenized BLEU (paper-era, compound-split; not comparable to sacreBLEU)"
_COMPOUND = re.compile(r"(\S)-(\S)")  # get_ende_bleu.sh: s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g


class ScoreError(UserError):
    """A user-facing error of `nmt score` (unreadable file, line counts differ)."""


@dataclass
class Scores:
    bleu: float
    bleu_signature: str
    bleu_text: str  # sacreBLEU's own line: "BLEU = 27.31 58.3/33.1/20.6/13.3 (BP = ...)"
    chrf: float
    chrf_signature: str
    chrf_text: str


def corpus_scores(hyps: list[str], refs: list[list[str]], *, tokenize: str = "13a") -> Scores:
    """sacreBLEU corpus BLEU (with ``tokenize``) and chrF of ``hyps`` against reference streams
    ``refs`` (each a list as long as ``hyps``)."""
    for r in refs:
        if len(r) != len(hyps):
            raise ScoreError(f"{len(hyps)} hypotheses but a reference has {len(r)} lines")
    bleu, chrf = BLEU(tokenize=tokenize), CHRF()
    b, c = bleu.corpus_score(hyps, refs), chrf.corpus_score(hyps, refs)
    return Scores(b.score, str(bleu.get_signature()), str(b), c.score, str(chrf.get_signature()), str(c))


def split_compounds(tokenized: str) -> str:
    """'rich-text format' -> 'rich ##AT##-##AT## text format' (non-overlapping, left to right,
    exactly as perl's s///g: 'a-b-c' -> 'a ##AT##-##AT## b-c')."""
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", tokenized)


def paper_tokenize(line: str) -> str:
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    return split_compounds(Tokenizer13a()(line.strip()))


def paper_bleu(hyps: list[str], refs: list[list[str]]) -> float:
    """Tokenized, compound-split BLEU as in tensor2tensor's get_ende_bleu.sh (see module doc)."""
    tok_hyps = [paper_tokenize(h) for h in hyps]
    tok_refs = [[paper_tokenize(r) for r in stream] for stream in refs]
    return BLEU(tokenize="none", smooth_method="none", force=True).corpus_score(tok_hyps, tok_refs).score


# ----------------------------------------------------------------------------- CLI
