"""Dynamic batching and fair scheduling: one worker thread per model takes what is waiting and
translates it, and a long search yields to shorter requests between its decoding steps.

Work. A request's work is its source pieces (+ EOS each, after truncation to the model's
positions) times its beam: the unit of the request and queue budgets (``--max-request-work``,
``--max-queue-work``) and of the scheduling below.

Batching. Requests (a list of sentences and search options) are queued. The worker takes the first
waiting request, then waits for the requests it expects: those that were waiting when its previous
batch ended (sent its first answer) plus as many as that batch answered (their clients are the
likely senders of the next ones; a client's next request, however soon it comes, is counted once),
at most ``max_wait_ms`` after the first one arrived or the worker became free (the later),
and only while fewer than ``max_batch_tokens`` source tokens are waiting. Then it takes the
requests with the same search options (beam, alpha, nbest, mbr) whose source tokens fit in
``max_batch_tokens`` and whose work is within ``MERGE_RATIO`` of the first's (or both under
``MERGE_FLOOR``: a short request is never held in a long one's search). A lone client therefore
never waits, and N concurrent clients, answered together, come back as one batch of N.
``Translator.translate_nbest`` sorts a batch's sentences by length into search batches of at most
``max_batch_tokens`` padded tokens; each request gets its own results back in its own order. What
follows the search (the teacher-forced scores behind confidences and guards, alignments) is one
pass over the batch's requests that ask for it, not one per request.

Scheduling. The worker starts waiting requests in arrival order, so nothing waits for ever. A
running search (torch engine) calls back before every decoding step (a ``Preemptible`` model
around the real one): there the worker (1) abandons it when every request in it was cancelled
(client gone, ``--timeout`` passed, server stopping), and (2) once it has run ``slice_ms`` since
it last started or resumed, runs the oldest waiting requests of much smaller work (at most
1/``MERGE_RATIO`` of its least request's; one batch, to the end) before the next step. A long
search therefore gets at least one slice in turn with the short batches, and a short request
waits about one slice and one decoding step for it, not the whole search; requests of similar
work take turns. The CTranslate2 engine can only be interrupted between its search batches.
Every model call (search, alignment, attention) runs on the worker thread, one at a time, so the
attention hooks of nmt.infer.attention_maps never see another request.

Batching and preemption must not change a translation: a sentence is searched independently of
the other rows of its batch (padding is masked), and a search resumed after another one continues
from its own explicit state (tests/test_serve*.py compare batched and single outputs). With a
vocabulary shortlist each sentence is searched over its own list of target pieces (the scope
"sentence", nmt.infer.shortlist), or with the scope "batch" each request over its own union
(``union_groups`` of ``Translator.translate_nbest``: one group per request), never its batch's; the
CTranslate2 engine has only its batch's union (its vocabulary map), so there its requests are never
batched together.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from ..infer.options import SearchOptions
from ..realtext.pipeline import align_results
from ..realtext.quality import score_results

MERGE_RATIO = 8  # requests batched together differ in work by at most this factor (and a search
#                  is interrupted only for requests this many times smaller) ...
MERGE_FLOOR = 2048  # ... unless both have at most this much work (pieces x beam)


class QueueFull(Exception):
    """The model's queue holds ``max_queue`` sentences or ``max_queue_work`` work already, or the
    worker is not running."""


class Cancelled(Exception):
    """Every request of the running batch was cancelled (client gone, deadline, server stopping)."""


@dataclass(frozen=True)
class JobOptions:
    """What a request asks of the search: how to search (requests with equal ``search`` and
    ``mbr`` share batches), the MBR choice and each sentence's phrases."""

    search: SearchOptions = SearchOptions()
    mbr: bool = False  # the MBR choice among the beam's n-best (nmt.infer.mbr's defaults)
    # each sentence's phrases (hard lexical constraints, nmt.infer.constraints): a request's own, so
    # requests with different ones still share a batch
    constraints: tuple[tuple[str, ...], ...] | None = field(default=None, compare=False)
    # with alignment: attention_maps.align's diagonal prior (tags projected: real_text's
    # PROJECTION_DIAGONAL, as nmt translate uses it; None: fairseq's plain argmax, the API's
    # "alignment" output); after the search, so requests with different ones still share a batch
    alignment_diagonal: float | None = field(default=None, compare=False)
    # each translation scored by teacher forcing after the search (nmt.realtext.quality: confidences
    # and guards; ``coverage``: the attention the omission guard reads)
    scores: bool = field(default=False, compare=False)
    coverage: bool = field(default=False, compare=False)


@dataclass
class Measured:
    """Source tokens of each sentence (pieces + EOS after truncation; 0 for an empty one) and
    (index, n_pieces) of each sentence cut to the model's positions (``max_positions``)."""

    tokens: list[int]
    truncated: list[tuple[int, int]]
    max_positions: int | None


@dataclass(eq=False)
class Job:
    kind: str  # "translate" or "attention"
    sentences: list[str]
    options: JobOptions
    alignment: bool
    n_tokens: int
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    deadline: float = float("inf")  # time.monotonic() after which nobody waits for the answer
    arrived: float = field(default_factory=time.monotonic)
    cancelled: bool = False  # set on the event loop when the future is cancelled

    @property
    def work(self) -> int:
        return self.n_tokens * self.options.search.beam

    def gone(self, now: float) -> bool:
        return self.cancelled or now > self.deadline


@dataclass(eq=False)
class Running:
    """The batch on the worker: its jobs and when it last started or resumed."""

    jobs: list[Job]
    preemptible: bool
    resumed: float = field(default_factory=time.monotonic)

    @property
    def work(self) -> int:
        return sum(j.work for j in self.jobs)


class Preemptible:
    """A model whose ``encode`` and ``decode_step`` call ``before()`` first (the worker's check
    point: cancel, or run shorter requests); everything else is the wrapped model's. Like
    nmt.infer.search.RecomputePrefix, the search sees an ordinary model."""

    def __init__(self, model, before: Callable[[], None]):
        self.model, self.cfg, self.before = model, model.cfg, before

    def encode(self, *args, **kwargs):
        self.before()
        return self.model.encode(*args, **kwargs)

    def decode_step(self, *args, **kwargs):
        self.before()
        return self.model.decode_step(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.model, name)


def per_request_unions(translator) -> bool:
    """Whether ``translator`` searches each request over its own shortlist union (the torch
    engine's ``union_groups``), so that its requests may share a batch."""
    return "union_groups" in inspect.signature(translator.translate_nbest).parameters


class Batcher:
    """The queue and worker of one model (``translator``: an nmt.infer.translate.Translator or an
    object with the same ``translate_nbest`` / ``encode``)."""

    def __init__(
        self,
        translator: Any,
        *,
        max_batch_tokens: int = 4096,
        max_wait_ms: float = 50.0,
        max_queue: int = 1024,
        max_queue_work: int = 1 << 20,
        slice_ms: float = 50.0,
        batching: bool = True,
        on_batch: Callable[[int], None] | None = None,
    ):
        self.translator = translator
        self.max_batch_tokens, self.max_wait = max_batch_tokens, max_wait_ms / 1000.0
        self.max_queue, self.max_queue_work, self.slice = max_queue, max_queue_work, slice_ms / 1000.0
        # a shortlist's search scores a union of target pieces (nmt.infer.shortlist): the torch engine
        # takes each request's own (union_groups); CTranslate2's vocabulary map takes its batch's,
        # where another client's sentences would change a translation, so each request goes alone
        self.batching = batching and (
            getattr(translator, "shortlist", None) is None or per_request_unions(translator)
        )
        self.on_batch = on_batch
        self._queue: list[Job] = []  # in arrival order
        self._queued_sentences = 0
        self._queued_work = 0
        self._cond = threading.Condition()
        self._stopping = False
        self._answered = 0  # requests the worker's previous batch answered
        self._answered_at = float("inf")  # when that batch sent its first answer
        self._running: list[Running] = []  # the batch on the worker, and one run inside it
        self._progress = time.monotonic()  # the worker's last step, batch or wait
        self._thread: threading.Thread | None = None
        self._died: str | None = None

    # --------------------------------------------------------------------------- client side
    @property
    def queue_length(self) -> int:
        """Sentences waiting (not yet taken by the worker)."""
        return self._queued_sentences

    @property
    def queue_work(self) -> int:
        """Work (pieces x beam) waiting."""
        return self._queued_work

    def measure(self, sentences: list[str]) -> Measured:
        encode = getattr(self.translator, "encode", None)
        if encode is None:
            return Measured([len(s.split()) + 1 if s.strip() else 0 for s in sentences], [], None)
        sources, truncated = encode(sentences)
        cfg = getattr(getattr(self.translator, "model", None), "cfg", None)
        return Measured([len(ids) for ids in sources], truncated, getattr(cfg, "max_positions", None))

    def count_tokens(self, sentences: list[str]) -> int:
        return sum(self.measure(sentences).tokens)

    def submit(
        self,
        sentences: list[str],
        options: JobOptions,
        *,
        alignment: bool = False,
        kind: str = "translate",
        n_tokens: int | None = None,
        timeout: float | None = None,
    ) -> asyncio.Future:
        """Queue a request from the event loop; the future gets a list (one entry per sentence) of
        lists of Translation (n-best), with ``alignment`` set on the first of each when asked, or
        for ``kind="attention"`` an (AttentionMaps or None, Translation) pair. Cancelling the
        future cancels the work (dropped from the queue, or the search abandoned at its next
        step); so does ``timeout`` seconds passing. ``n_tokens``: the sentences' source tokens
        when already measured. Raises QueueFull."""
        loop = asyncio.get_running_loop()
        n_tokens = self.count_tokens(sentences) if n_tokens is None else n_tokens
        job = Job(kind, sentences, options, alignment, n_tokens, loop.create_future(), loop)
        if timeout is not None:
            job.deadline = job.arrived + timeout
        with self._cond:
            if self._stopping:
                raise QueueFull("the server is shutting down")
            if self._died is not None:
                raise QueueFull(f"the worker is not running ({self._died})")
            if self._queue and self._queued_sentences + len(sentences) > self.max_queue:
                raise QueueFull(
                    f"queue full: {self._queued_sentences} sentences are waiting "
                    f"(--max-queue {self.max_queue})"
                )
            if self._queue and self._queued_work + job.work > self.max_queue_work:
                raise QueueFull(
                    f"queue full: {self._queued_work:,} pieces x beam are waiting and this request is "
                    f"{job.work:,} (--max-queue-work {self.max_queue_work:,})"
                )
            self._queue.append(job)
            self._queued_sentences += len(sentences)
            self._queued_work += job.work
            self._cond.notify()
        job.future.add_done_callback(lambda f: self._on_cancel(job) if f.cancelled() else None)
        return job.future

    def _on_cancel(self, job: Job) -> None:
        job.cancelled = True
        with self._cond:
            if job in self._queue:
                self._remove([job])
                self._cond.notify()

    def health(self, *, stall_s: float) -> str | None:
        """None when the worker is running and, if it has work, made progress (a search step, a
        batch) within ``stall_s`` seconds; else what is wrong."""
        if self._died is not None:
            return f"the worker thread died ({self._died})"
        if self._thread is None or not self._thread.is_alive():
            return "the worker thread is not running"
        with self._cond:  # a request that came while the worker waited idle counts from its arrival
            since = max([self._progress] + [j.arrived for j in self._queue[:1]])
            busy = bool(self._queue or self._running)
        idle = time.monotonic() - since
        if busy and idle > stall_s:
            return (
                f"no progress for {idle:.0f} s with {len(self._queue)} requests waiting "
                f"and {sum(len(r.jobs) for r in self._running)} running"
            )
        return None

    # --------------------------------------------------------------------------- worker side
    def start(self) -> None:
        """Start the worker (again after ``stop``: an app's lifespan may run more than once)."""
        with self._cond:
            self._stopping, self._died, self._progress = False, None, time.monotonic()
        self._thread = threading.Thread(target=self._run, name="nmt-batcher", daemon=True)
        self._thread.start()

    def stop(self, *, timeout: float = 30.0) -> None:
        """End the worker: the requests still queued are failed, the running search is abandoned
        at its next step. (The HTTP server has answered, or given up on, every request by then.)"""
        with self._cond:
            self._stopping = True
            dropped, self._queue = self._queue, []
            self._queued_sentences = self._queued_work = 0
            self._cond.notify()
        for job in dropped:
            self._finish(job, QueueFull("the server is shutting down"))
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _remove(self, jobs: list[Job]) -> None:
        for job in jobs:
            self._queue.remove(job)
            self._queued_sentences -= len(job.sentences)
            self._queued_work -= job.work

    def _drop_gone(self) -> None:
        """Remove the requests nobody waits for any more (lock held)."""
        now = time.monotonic()
        gone = [j for j in self._queue if j.gone(now)]
        self._remove(gone)
        for job in gone:
            self._finish(job, Cancelled("cancelled: the client went away or its deadline passed"))

    def _pick(self, *, max_work: int | None = None) -> list[Job]:
        """The next batch from the queue (lock held): the oldest request, then its batch-mates (see
        the module docstring); only requests of at most ``max_work`` if given."""
        self._drop_gone()
        candidates = [j for j in self._queue if max_work is None or j.work <= max_work]
        if not candidates:
            return []
        first = candidates[0]
        jobs = [first]
        if first.kind == "translate" and self.batching:
            tokens = first.n_tokens
            for job in candidates[1:]:
                small, large = sorted((max(job.work, 1), max(first.work, 1)))
                if (
                    job.kind == "translate"
                    and job.options == first.options
                    and tokens + job.n_tokens <= self.max_batch_tokens
                    and (large <= MERGE_FLOOR or large <= MERGE_RATIO * small)
                ):
                    tokens += job.n_tokens
                    jobs.append(job)
        self._remove(jobs)
        return jobs

    def _take(self) -> list[Job] | None:
        with self._cond:
            # see the module docstring: what the previous batch answered, and what was waiting then
            expected = self._answered + sum(j.arrived < self._answered_at for j in self._queue)
            free = time.monotonic()  # the worker is free from now on
            while True:
                if self._stopping:
                    return None
                self._drop_gone()
                if self._queue:
                    break
                self._progress = time.monotonic()  # idle is not stalled
                self._cond.wait()
            if self.batching:
                deadline = max(self._queue[0].arrived, free) + self.max_wait
                while (
                    not self._stopping
                    and self._queue
                    and len(self._queue) < expected
                    and sum(j.n_tokens for j in self._queue) < self.max_batch_tokens
                    and (remaining := deadline - time.monotonic()) > 0
                ):
                    self._cond.wait(remaining)
            jobs = self._pick()
            if jobs and jobs[0].kind == "translate" and self.batching:
                self._answered = len(jobs)
            self._answered_at = float("inf")  # until this batch answers
            self._progress = time.monotonic()
            return jobs

    def _run(self) -> None:
        try:
            while (jobs := self._take()) is not None:
                if jobs:
                    self._run_batch(jobs, preemptible=True)
        except BaseException as e:  # noqa: BLE001  (reported by /health; waiting requests are failed)
            self._died = self._died or f"{type(e).__name__}: {e}"
            print(f"nmt serve: the worker thread died: {self._died}", file=sys.stderr)
            traceback.print_exc()
            with self._cond:
                dropped, self._queue = self._queue, []
                self._queued_sentences = self._queued_work = 0
            for job in dropped:
                self._finish(job, RuntimeError(f"the worker thread died ({self._died})"))

    def _run_batch(self, jobs: list[Job], *, preemptible: bool) -> None:
        running = Running(jobs, preemptible)
        self._running.append(running)
        try:
            if jobs[0].kind == "attention":
                self._answer(running, jobs[0], self._attention(jobs[0], running))
            else:
                self._translate(jobs, running)
        except Cancelled as e:
            for job in jobs:
                self._answer(running, job, e)
        except Exception as e:  # noqa: BLE001  (sent back to the waiting requests as a 500)
            for job in jobs:
                self._answer(running, job, e)
        except BaseException as e:  # the worker ends (see _run): its requests are answered first
            self._died = f"{type(e).__name__}: {e}"
            for job in jobs:
                self._answer(running, job, RuntimeError(f"the worker thread died ({type(e).__name__}: {e})"))
            raise
        finally:
            self._running.remove(running)

    def _check_point(self, running: Running) -> None:
        """Called before every model call of the running batch's search (and between its search
        batches): abandon it if nobody waits for it; else, after a slice, run a shorter batch."""
        now = time.monotonic()
        self._progress = now
        if self._stopping or all(j.gone(now) for j in running.jobs):
            raise Cancelled("cancelled: the client went away, its deadline passed or the server is stopping")
        if not running.preemptible or now - running.resumed < self.slice:
            return
        with self._cond:
            jobs = self._pick(max_work=min(j.work for j in running.jobs) // MERGE_RATIO)
        if jobs:
            self._run_batch(jobs, preemptible=False)
            running.resumed = time.monotonic()

    def _translator(self, running: Running):
        """The translator whose model calls pass through the check point (torch engine)."""
        model = getattr(self.translator, "model", None)
        if not hasattr(model, "decode_step") or not hasattr(model, "cfg"):
            return self.translator
        t = copy.copy(self.translator)
        t.model = Preemptible(model, lambda: self._check_point(running))
        return t

    def _answer(self, running: Running, job: Job, value: Any) -> None:
        """Send a batch's result (or error) for ``job``; the first answer of a batch taken from the
        queue is when that batch ended (see _take)."""
        if running.preemptible:  # not a batch run between the steps of another one
            self._answered_at = min(self._answered_at, time.monotonic())
        self._finish(job, value)

    @staticmethod
    def _finish(job: Job, value: Any) -> None:
        def set_value() -> None:
            if job.future.done():  # the client went away
                return
            if isinstance(value, Exception):
                job.future.set_exception(value)
            else:
                job.future.set_result(value)

        try:
            job.loop.call_soon_threadsafe(set_value)
        except RuntimeError:  # the event loop is closed: nobody waits
            pass

    def _translate(self, jobs: list[Job], running: Running) -> None:
        translator = self._translator(running)
        opts = jobs[0].options
        sentences = [s for job in jobs for s in job.sentences]
        if self.on_batch is not None:
            self.on_batch(len(sentences))
        constraints = None
        if any(job.options.constraints for job in jobs):  # the requests' phrases, in the batch's order
            constraints = [
                list(c) for job in jobs for c in job.options.constraints or [()] * len(job.sentences)
            ]
        groups = {}
        if getattr(translator, "shortlist", None) is not None and per_request_unions(translator):
            groups["union_groups"] = [k for k, job in enumerate(jobs) for _ in job.sentences]
        results = translator.translate_nbest(
            sentences,
            opts.search.replace(nbest=opts.search.beam) if opts.mbr else opts.search,
            batch_tokens=max(self.max_batch_tokens, 1),
            on_truncate=lambda i, n: None,
            on_batch=lambda n: self._check_point(running),
            **({} if constraints is None else {"constraints": constraints}),
            **groups,
        )
        if opts.mbr:
            from ..infer.mbr import MBR, mbr_results

            results = mbr_results(results, MBR())  # one translation per sentence
        per_job, start = [], 0
        for job in jobs:
            per_job.append(results[start : start + len(job.sentences)])
            start += len(job.sentences)
        self._after_search(jobs, per_job)
        for job, mine in zip(jobs, per_job):
            self._answer(running, job, mine)

    def _after_search(self, jobs: list[Job], per_job: list[list]) -> None:
        """The teacher-forced scores and the alignments the batch's requests ask for, each one pass
        over every request that shares its settings (coverage; the alignment's diagonal prior), not
        one per request; requests nobody waits for any more are left out."""
        now = time.monotonic()
        live = [(job, mine) for job, mine in zip(jobs, per_job) if not job.gone(now)]
        scored: dict[bool, list] = {}
        aligned: dict[float | None, list] = {}
        for job, mine in live:
            if job.options.scores:
                scored.setdefault(job.options.coverage, []).append((job, mine))
            if job.alignment:
                aligned.setdefault(job.options.alignment_diagonal, []).append((job, mine))
        for coverage, group in scored.items():
            sentences = [s for job, _ in group for s in job.sentences]
            score_results(
                self.translator, sentences, [r for _, mine in group for r in mine], coverage=coverage
            )
        for diagonal, group in aligned.items():
            sentences = [s for job, _ in group for s in job.sentences]
            align_results(
                self.translator, sentences, [r for _, mine in group for r in mine], diagonal=diagonal
            )

    def _attention(self, job: Job, running: Running):
        from ..infer.attention_maps import attention_maps

        opts = job.options
        best = self._translator(running).translate_nbest(
            job.sentences, opts.search.replace(nbest=1), on_truncate=lambda i, n: None
        )[0][0]
        sources, _ = self.translator.encode(job.sentences)
        if not sources[0]:
            return None, best
        self._check_point(running)
        return attention_maps(self.translator.model, sources[0], best.tokens), best
