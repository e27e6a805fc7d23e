"""Dynamic batching: one worker thread per model takes what is waiting and translates it at once.

Requests (a list of sentences and search options) are queued. The worker takes the first waiting
request, then waits for the requests it expects: those that were waiting when its previous batch
ended plus as many as that batch answered (their clients are the likely senders of the next
ones), at most ``max_wait_ms`` after the first one arrived or the worker became free (the later),
and only while fewer than ``max_batch_tokens`` source tokens are waiting. Then it takes requests
in arrival order while their source tokens fit in ``max_batch_tokens`` (always at least one
request). A lone client therefore never waits, and N concurrent clients, answered together, come
back as one batch of N (two groups translated one after the other merge into one), instead of
being cut into pieces by a fixed wait shorter than the time N responses and requests take to
cross the HTTP layer.

Requests with the same search options (beam, alpha, nbest, mbr) are translated together by
``Translator.translate_nbest``, which sorts the sentences by length into batches of at most
``max_batch_tokens`` padded tokens; each request gets its own results back in its own order.
Every model call (search, alignment, attention) runs on the worker thread, so the attention
hooks of nmt.infer.attention never see another request.

Batching must not change a translation: a sentence is searched independently of the other rows of
its batch (padding is masked; tests/test_serve*.py compare batched and single outputs).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable


class QueueFull(Exception):
    """The model's queue holds ``max_queue`` sentences already."""


@dataclass(frozen=True)
class SearchOptions:
    beam: int = 4
    alpha: float = 0.6
    nbest: int = 1
    mbr: bool = False  # the MBR choice among the beam's n-best (nmt.infer.mbr's defaults)


@dataclass
class Job:
    kind: str  # "translate" or "attention"
    sentences: list[str]
    options: SearchOptions
    alignment: bool
    n_tokens: int
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    arrived: float = field(default_factory=time.monotonic)


class Batcher:
    """The queue and worker of one model (``translator``: an nmt.infer.translate.Translator or an
    object with the same ``translate_nbest`` / ``encode``)."""

    def __init__(self, translator: Any, *, max_batch_tokens: int = 4096, max_wait_ms: float = 50.0,
                 max_queue: int = 1024, batching: bool = True,
                 on_batch: Callable[[int], None] | None = None):
        self.translator = translator
        self.max_batch_tokens, self.max_wait = max_batch_tokens, max_wait_ms / 1000.0
        self.max_queue, self.batching, self.on_batch = max_queue, batching, on_batch
        self._queue: deque[Job] = deque()
        self._queued_sentences = 0
        self._cond = threading.Condition()
        self._stopping = False
        self._answered = 0  # requests the worker's previous batch answered
        self._thread: threading.Thread | None = None

    # --------------------------------------------------------------------------- client side
    @property
    def queue_length(self) -> int:
        """Sentences waiting (not yet taken by the worker)."""
        return self._queued_sentences

    def count_tokens(self, sentences: list[str]) -> int:
        encode = getattr(self.translator, "encode", None)
        if encode is None:
            return sum(len(s.split()) + 1 for s in sentences)
        return sum(len(ids) for ids in encode(sentences)[0])

    def submit(self, sentences: list[str], options: SearchOptions, *, alignment: bool = False,
               kind: str = "translate") -> asyncio.Future:
        """Queue a request from the event loop; the future gets a list (one entry per sentence) of
        lists of Translation (n-best), with ``alignment`` set on each when asked, or for
        ``kind="attention"`` an (AttentionMaps, Translation) pair. Raises QueueFull."""
        loop = asyncio.get_running_loop()
        job = Job(kind, sentences, options, alignment, self.count_tokens(sentences), loop.create_future(), loop)
        with self._cond:
            if self._stopping:
                raise QueueFull("the server is shutting down")
            if self._queue and self._queued_sentences + len(sentences) > self.max_queue:
                raise QueueFull(f"{self._queued_sentences} sentences are waiting (--max-queue {self.max_queue})")
            self._queue.append(job)
            self._queued_sentences += len(sentences)
            self._cond.notify()
        return job.future

    # --------------------------------------------------------------------------- worker side
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="nmt-batcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Finish every queued request, then end the worker."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()

    def _take(self) -> list[Job] | None:
        with self._cond:
            expected = self._answered + len(self._queue)  # see the module docstring
            free = time.monotonic()  # the worker is free from now on
            while not self._queue:
                if self._stopping:
                    return None
                self._cond.wait()
            if self.batching:
                deadline = max(self._queue[0].arrived, free) + self.max_wait
                while (not self._stopping and len(self._queue) < expected
                       and sum(j.n_tokens for j in self._queue) < self.max_batch_tokens
                       and (remaining := deadline - time.monotonic()) > 0):
                    self._cond.wait(remaining)
            jobs = [self._queue.popleft()]
            if jobs[0].kind == "translate" and self.batching:
                tokens = jobs[0].n_tokens
                while (self._queue and self._queue[0].kind == "translate"
                       and tokens + self._queue[0].n_tokens <= self.max_batch_tokens):
                    tokens += self._queue[0].n_tokens
                    jobs.append(self._queue.popleft())
                self._answered = len(jobs)
            self._queued_sentences -= sum(len(j.sentences) for j in jobs)
            return jobs

    def _run(self) -> None:
        while (jobs := self._take()) is not None:
            try:
                if jobs[0].kind == "attention":
                    self._finish(jobs[0], self._attention(jobs[0]))
                else:
                    self._translate(jobs)
            except Exception as e:  # noqa: BLE001  (sent back to the waiting requests as a 500)
                for job in jobs:
                    self._finish(job, e)

    @staticmethod
    def _finish(job: Job, value: Any) -> None:
        def set_value() -> None:
            if job.future.done():  # the client went away
                return
            if isinstance(value, Exception):
                job.future.set_exception(value)
            else:
                job.future.set_result(value)

        job.loop.call_soon_threadsafe(set_value)

    def _translate(self, jobs: list[Job]) -> None:
        groups: dict[SearchOptions, list[Job]] = {}
        for job in jobs:
            groups.setdefault(job.options, []).append(job)
        for opts, group in groups.items():
            sentences = [s for job in group for s in job.sentences]
            if self.on_batch is not None:
                self.on_batch(len(sentences))
            results = self.translator.translate_nbest(
                sentences, beam=opts.beam, alpha=opts.alpha, nbest=opts.beam if opts.mbr else opts.nbest,
                batch_tokens=max(self.max_batch_tokens, 1), on_truncate=lambda i, n: None)
            if opts.mbr:
                from ..infer.mbr import MBR
                from ..infer.translate import mbr_results

                results = mbr_results(results, MBR())  # one translation per sentence
            start = 0
            for job in group:
                mine = results[start: start + len(job.sentences)]
                start += len(job.sentences)
                if job.alignment:
                    self._add_alignments(job.sentences, mine)
                self._finish(job, mine)

    def _add_alignments(self, sentences: list[str], results: list) -> None:
        from ..infer.attention import align

        sources, _ = self.translator.encode(sentences)
        for src, nbest in zip(sources, results):
            for t in nbest:
                t.alignment = align(self.translator.model, src, t.tokens)

    def _attention(self, job: Job):
        from ..infer.attention import attention_maps

        opts = job.options
        best = self.translator.translate_nbest(job.sentences, beam=opts.beam, alpha=opts.alpha,
                                               on_truncate=lambda i, n: None)[0][0]
        sources, _ = self.translator.encode(job.sentences)
        if not sources[0]:
            return None, best
        return attention_maps(self.translator.model, sources[0], best.tokens), best
