"""Search options: one frozen value that says how to search, given once and passed whole.

    options = SearchOptions(beam=4, alpha=0.6)            # the paper's (section 6.1)
    translator.translate(lines, options)                  # or translator.translate(lines, beam=4)
    beam_search(model, src, options)                      # the same value at every layer

``SearchOptions`` holds what decides the output of a search: beam size, length penalty, how many
hypotheses to return, the output length limit, the stopping rule, sampling instead of search, and
the n-gram repeat block. What varies per sentence (prefixes, phrases to include, a shortlist's union
groups) and how sentences are batched are passed beside it, as data. An invalid value cannot be
built: every field is checked when the value is made (ValueError naming the field), so a batch of
empty lines is refused alike.

The output length rule (the paper's "input length + 50", section 6.1) lives here, once:
|Y| (EOS included) <= min(floor(max_len_a * |x| + max_len_b), max_positions), and >= 1, where |x|
counts the source pieces and EOS.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass

STOPPING = ("exact", "fast")  # beam search's early termination rules (nmt.infer.search.still_searching)
MAX_ALPHA = 100.0  # |alpha| above ~138 overflows ((5 + |Y|) / 6) ** alpha at |Y| = 1,024


def default_alpha(beam: int) -> float:
    """The length penalty when none is given: the paper's 0.6 for beam search, 0 for beam 1 (greedy)."""
    return 0.0 if beam == 1 else 0.6


def check_lengths(max_len_a: float, max_len_b: float) -> None:
    """ValueError unless the output length limit a * |x| + b has finite ``max_len_a``, ``max_len_b``."""
    if not (math.isfinite(max_len_a) and math.isfinite(max_len_b)):
        raise ValueError(f"max_len_a={max_len_a}, max_len_b={max_len_b}: must be finite numbers")


def check_search_range(
    *, beam, nbest, max_len_a: float, max_len_b: float, alpha: float | None = None
) -> None:
    """ValueError naming a search option out of range: ``beam`` an integer >= 1, ``nbest`` one in
    [1, beam], ``max_len_a`` and ``max_len_b`` finite, ``alpha`` (None: the default) within
    [-MAX_ALPHA, MAX_ALPHA]."""
    if alpha is not None and not -MAX_ALPHA <= alpha <= MAX_ALPHA:  # nan too
        raise ValueError(f"alpha={alpha}: must be a number in [-{MAX_ALPHA:g}, {MAX_ALPHA:g}]")
    if not isinstance(beam, numbers.Integral) or beam < 1:
        raise ValueError(f"beam={beam!r}: must be an integer >= 1")
    if not isinstance(nbest, numbers.Integral) or not 1 <= nbest <= beam:
        raise ValueError(f"nbest={nbest!r}: must be between 1 and beam={beam}")
    check_lengths(max_len_a, max_len_b)


def check_sampling_range(*, temperature: float, topk: int, topp: float) -> None:
    """ValueError unless 0 < temperature < inf (nan and inf leave no distribution), topk >= 0 (0:
    all tokens) and 0 < topp <= 1."""
    if not 0 < temperature < math.inf or topk < 0 or not 0 < topp <= 1:
        raise ValueError(
            f"temperature={temperature}, topk={topk}, topp={topp}: need 0 < T < inf, "
            "topk >= 0 (0: all), 0 < topp <= 1"
        )


@dataclass(frozen=True)
class Sampling:
    """Sample one output per sentence instead of searching (nmt.infer.search.sample):
    softmax(logits / temperature), restricted to the ``topk`` (0: all) most probable tokens and the
    ``topp`` nucleus; sentence i of the input draws from a stream seeded by (seed, i)."""

    temperature: float = 1.0
    topk: int = 0
    topp: float = 1.0
    seed: int = 0

    def __post_init__(self):
        check_sampling_range(temperature=self.temperature, topk=self.topk, topp=self.topp)


@dataclass(frozen=True, kw_only=True)
class SearchOptions:
    """How to search; see the module docstring. ``alpha`` None: default_alpha(beam) (``penalty``
    resolves it); ``stopping`` None: the engine's own rule ("exact", the paper's, for the torch
    engine; "fast" for CTranslate2); ``min_len``: EOS not before |Y| >= min_len;
    ``no_repeat_ngram`` n > 0: no hypothesis repeats an n-gram of its own (fairseq's
    --no-repeat-ngram-size; 0: off, the paper's search)."""

    beam: int = 4
    alpha: float | None = None
    nbest: int = 1
    max_len_a: float = 1.0
    max_len_b: int = 50
    min_len: int = 1
    stopping: str | None = None
    sampling: Sampling | None = None
    no_repeat_ngram: int = 0

    def __post_init__(self):
        check_search_range(
            beam=self.beam,
            nbest=self.nbest,
            max_len_a=self.max_len_a,
            max_len_b=self.max_len_b,
            alpha=self.alpha,
        )
        if self.stopping is not None and self.stopping not in STOPPING:
            raise ValueError(f"stopping={self.stopping!r}: must be one of {', '.join(STOPPING)}")
        if not isinstance(self.min_len, numbers.Integral) or self.min_len < 0:
            raise ValueError(f"min_len={self.min_len!r}: must be an integer >= 0")
        if not isinstance(self.no_repeat_ngram, numbers.Integral) or self.no_repeat_ngram < 0:
            raise ValueError(f"no_repeat_ngram={self.no_repeat_ngram!r}: must be an integer >= 0 (0: off)")
        if self.sampling is not None and self.nbest != 1:
            raise ValueError(f"nbest={self.nbest}: sampling draws one output per sentence (nbest 1)")

    @property
    def penalty(self) -> float:
        """The length penalty's alpha, resolved: ``alpha``, else default_alpha(beam)."""
        return default_alpha(self.beam) if self.alpha is None else self.alpha

    def stopping_rule(self, engine_default: str = "exact") -> str:
        """``stopping``, else the engine's own rule."""
        return self.stopping or engine_default

    def max_len(self, src_len: int, max_positions: int) -> int:
        """The longest output |Y| (EOS included) for a source of ``src_len`` tokens (pieces + EOS):
        floor(max_len_a * |x| + max_len_b), at most ``max_positions``, at least 1."""
        return max(1, min(int(math.floor(self.max_len_a * src_len + self.max_len_b)), max_positions))

    def replace(self, **changes) -> SearchOptions:
        """A copy with ``changes`` (checked as a new value)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_args(cls, args, **changes) -> SearchOptions:
        """The options of a command's parsed arguments (``nmt translate``, ``tune-alpha``,
        ``plot-attention``, ``parse``...): the fields the parser defines (an absent one keeps its
        default), a Sampling when ``args.sampling`` (--sampling) is set, then ``changes``."""
        values = {
            f.name: getattr(args, f.name)
            for f in dataclasses.fields(cls)
            if f.name != "sampling" and getattr(args, f.name, None) is not None
        }
        if getattr(args, "sampling", False) is True:
            values["sampling"] = Sampling(
                temperature=args.temperature, topk=args.topk, topp=args.topp, seed=args.seed
            )
        return cls(**{**values, **changes})


GREEDY = SearchOptions(beam=1, alpha=0.0)


def with_fields(options: SearchOptions | None, fields: dict) -> SearchOptions:
    """``options`` (None: the defaults) with ``fields`` (SearchOptions field names, as the Python
    API's keywords ``beam=4, alpha=0.6``) changed; TypeError naming a keyword that is no field."""
    unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(SearchOptions)})
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {', '.join(map(repr, unknown))}: not search options")
    if options is not None and not isinstance(options, SearchOptions):
        raise TypeError(f"options: expected a SearchOptions, got {type(options).__name__}")
    options = options or SearchOptions()
    return options.replace(**fields) if fields else options
