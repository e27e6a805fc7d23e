"""How the benchmarks time decoding (benchmarks/translate_speed.py, benchmarks/speed_quality.py): the
same work for nmt and CTranslate2, each engine timed in a fresh process of its own.

The work, alike for both engines: the same token-id sources (tokenization outside the timing on
both sides), the same length-sorted batches of at most ``batch_tokens`` padded source tokens, the
same beam, length penalty (greedy: none) and output length limit, the same number of threads. The
output: each source's best hypothesis, ids without BOS/EOS. nmt searches with a row's stopping
rule (``exact``, the paper's and its default, or ``fast``, CTranslate2's); CTranslate2 always
stops by its own rule. A timed search is preceded in its process by the same search untimed (of
every source, or of the first ``warmup``), so that first-call costs (oneDNN's kernels made for each
new shape, allocations) fall outside the timing for both engines.

Why one process per engine. CTranslate2's OpenMP calls (``GOMP_parallel``, ``omp_set_num_threads``)
bind to the libgomp that torch loaded into the process first, not to the copy CTranslate2 bundles
(``LD_DEBUG=bindings`` shows it). Once CTranslate2 has searched in a process, that one libgomp
manages CTranslate2's threads beside torch's, more threads than CPUs, and from then on it lets
every waiting thread of both engines spin only ``GOMP_SPINCOUNT``'s throttled count (1,000 instead
of 300,000; libgomp's ``do_spin``) before it sleeps in the kernel. torch's threads then sleep
between the many small operators of a decoding step and are woken for each one: nmt timed after
CTranslate2 in one process is timed in a state no user of `nmt translate` runs it in. A decode
that ran first in its process, before any CTranslate2 search, was not. So each round runs every
engine's rows in a process where the other engine never ran (the CTranslate2 process keeps torch
at one thread, so that no torch thread pool starts beside CTranslate2's), and the rounds alternate
which engine goes first.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ENGINES = ("nmt", "ct2")
# seconds between a search's warm-up and its timing, for the warm-up's threads to settle; a test that
# checks the rows, not their speed, sets NMT_BENCH_SETTLE_SECONDS=0
SETTLE_SECONDS = float(os.environ.get("NMT_BENCH_SETTLE_SECONDS", "0.2"))


@dataclass(frozen=True)
class Search:
    """One timed search: beam size (1: greedy), nmt's stopping rule (CTranslate2: its own), and
    whether it searches the shortlist's union (nmt) / the vocabulary map (CTranslate2)."""

    beam: int
    stopping: str = "exact"
    listed: bool = False


@dataclass(frozen=True)
class Rows:
    """What one translator decodes in a worker: ``engine`` "nmt" (``paths``: one checkpoint, or
    several: an ensemble) or "ct2" (``paths``: one exported CTranslate2 directory, with its
    vmap.txt for listed searches) at ``precision`` (fp32, int8); ``sources``: token ids ending with
    EOS ([]: an empty line, not searched); ``shortlist`` (nmt): a Shortlist, or an `nmt shortlist`
    file checked against the checkpoint, for the listed searches."""

    engine: str
    precision: str
    paths: tuple[str, ...]
    sources: list[list[int]]
    searches: tuple[Search, ...]
    shortlist: object = None


@dataclass(frozen=True)
class Work:
    """The settings every row shares (both engines): batches of ``batch_tokens`` padded source
    tokens, length penalty ``alpha`` for beam > 1, outputs of at most ``max_len_a`` * |x| +
    ``max_len_b`` tokens and at least ``min_len``, ``threads``, a warm-up search of the first
    ``warmup`` sources (0: all of them)."""

    batch_tokens: int = 2048
    alpha: float = 0.6
    max_len_a: float = 1.0
    max_len_b: int = 50
    min_len: int = 1
    threads: int = 2
    warmup: int = 0

    def options(self, search: Search, engine: str):
        from nmt.infer.options import SearchOptions

        return SearchOptions(
            beam=search.beam,
            alpha=self.alpha if search.beam > 1 else 0.0,
            stopping=search.stopping if engine == "nmt" and search.beam > 1 else None,
            max_len_a=self.max_len_a,
            max_len_b=self.max_len_b,
            min_len=self.min_len,
        )


@dataclass
class Timed:
    """A search's fastest time over the rounds, every round's time, its outputs (the last round's;
    the search is deterministic) and the processes it was timed in."""

    seconds: float = float("inf")
    rounds: list[float] = field(default_factory=list)
    ids: list[list[int]] | None = None
    processes: list[dict] = field(default_factory=list)


def process_record() -> dict:
    """What a worker reports of its process: its id, whether CTranslate2 was ever imported in it,
    torch's thread count."""
    import torch

    return {
        "pid": os.getpid(),
        "ctranslate2": "ctranslate2" in sys.modules,
        "threads": torch.get_num_threads(),
    }


def nmt_searcher(rows: Rows, work: Work):
    """A function of a Search returning the best ids per source, searched by nmt's torch engine
    loaded as `nmt translate` loads it (Translator.load: float32 linear layers packed for oneDNN,
    int8 quantized)."""
    from nmt.infer.shortlist import Shortlist
    from nmt.infer.translate import BatchedSearch, Translator

    paths = list(rows.paths) if len(rows.paths) > 1 else rows.paths[0]
    t = Translator.load(paths, device="cpu", precision=rows.precision, shortlist=False)  # Search.listed says
    shortlist = rows.shortlist
    if shortlist is not None and not isinstance(shortlist, Shortlist):
        t.use_shortlist(shortlist)  # checked against the checkpoint's vocabulary
        shortlist, t.shortlist = t.shortlist, None

    def search(s: Search, sources: list[list[int]]) -> list[list[int]]:
        searcher = BatchedSearch(
            work.options(s, "nmt"), dtype=t.dtype, shortlist=shortlist if s.listed else None
        )
        return [h[0].tokens for h in searcher.sources(t.model, sources, batch_tokens=work.batch_tokens)]

    return search


def ct2_searcher(rows: Rows, work: Work):
    """The same for CTranslate2, loading the exported directory with ``work.threads`` threads."""
    from nmt.infer.engine_ctranslate2 import COMPUTE_TYPES, CTranslate2Translator, load_ctranslate2

    model = load_ctranslate2(rows.paths[0], compute_type=COMPUTE_TYPES[rows.precision], threads=work.threads)
    t = CTranslate2Translator(model, None)

    def search(s: Search, sources: list[list[int]]) -> list[list[int]]:
        hyps = t.search_ids(
            sources, work.options(s, "ct2"), batch_tokens=work.batch_tokens, use_vmap=s.listed
        )
        return [h[0][0] for h in hyps]

    return search


def time_rows(engine: str, group: list[Rows], work: Work) -> tuple[list[list], dict]:
    """The worker (run in a fresh process): each of ``group``'s translators loaded in turn (not
    timed), each of its searches warmed up then timed once. Returns per Rows per Search (seconds,
    ids), or the reason why the translator could not be loaded ("unavailable (...)"), and
    process_record()."""
    import torch

    # CTranslate2's process: no torch thread pool beside CTranslate2's threads (see the docstring)
    torch.set_num_threads(work.threads if engine == "nmt" else 1)
    out = []
    for rows in group:
        try:
            search = (nmt_searcher if engine == "nmt" else ct2_searcher)(rows, work)
        except Exception as e:  # an nmt without int8, say: the rows say so
            out.append([f"unavailable ({type(e).__name__})"] * len(rows.searches))
            continue
        timed = []
        for s in rows.searches:
            search(s, rows.sources[: work.warmup or len(rows.sources)])
            time.sleep(SETTLE_SECONDS)  # the warm-up's threads settle
            start = time.perf_counter()
            ids = search(s, rows.sources)
            timed.append((time.perf_counter() - start, ids))
        out.append(timed)
        del search
    return out, process_record()


def in_fresh_process(fn, *args):
    """``fn(*args)`` in a new (spawned) Python process; its return value."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


def measure(groups: dict[str, list[Rows]], work: Work, repeat: int, *, log=None) -> dict:
    """Time every search of ``groups`` ({"nmt": [Rows...], "ct2": [Rows...]}) ``repeat`` times: in
    each round one fresh process per engine (time_rows), the engines' order alternating between
    rounds. Returns {(engine, i, j): Timed} for the j-th search of the i-th Rows, or the
    "unavailable" string."""
    results: dict = {}
    order = [e for e in ENGINES if groups.get(e)]
    for r in range(repeat):
        for engine in order if r % 2 == 0 else order[::-1]:
            out, process = in_fresh_process(time_rows, engine, groups[engine], work)
            for i, timed in enumerate(out):
                for j, result in enumerate(timed):
                    if isinstance(result, str):
                        results[(engine, i, j)] = result
                        continue
                    t = results.setdefault((engine, i, j), Timed())
                    t.rounds.append(result[0])
                    t.seconds, t.ids = min(t.seconds, result[0]), result[1]
                    t.processes.append(process)
            if log is not None:
                log(f"round {r + 1}: {engine} timed in process {process['pid']}")
    return results
