"""The Prometheus metrics of `nmt serve` (GET /metrics): requests, errors and latency per endpoint,
sentences and batch sizes per model, and each model's queue read when scraped."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .batcher import Batcher


class Metrics:
    """One app's metrics, in a registry of its own (two apps in one process count apart); ``watch``
    adds each model's queue gauges and the sentences of each of its batches."""

    def __init__(self):
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "nmt_requests",
            "HTTP requests by endpoint and status (499: the client went away first)",
            ["endpoint", "status"],
            registry=self.registry,
        )
        self.errors = Counter(
            "nmt_errors", "HTTP error responses (status >= 400) by status", ["status"], registry=self.registry
        )
        self.latency = Histogram(
            "nmt_request_latency_seconds",
            "request latency",
            ["endpoint"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.sentences = Counter("nmt_sentences", "sentences translated", ["model"], registry=self.registry)
        self.batch_sentences = Histogram(
            "nmt_batch_sentences",
            "sentences per batch",
            ["model"],
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
            registry=self.registry,
        )
        self.queue = Gauge(
            "nmt_queue_sentences", "sentences waiting in the queue", ["model"], registry=self.registry
        )
        self.queue_work = Gauge(
            "nmt_queue_work",
            "work waiting in the queue (source pieces x beam)",
            ["model"],
            registry=self.registry,
        )

    def watch(self, batchers: dict[str, Batcher]) -> None:
        """Read each batcher's queue (model name -> its batcher) when scraped, and set its
        ``on_batch`` to count the sentences of each batch it searches."""
        for name, batcher in batchers.items():
            self.queue.labels(model=name).set_function(lambda b=batcher: b.queue_length)
            self.queue_work.labels(model=name).set_function(lambda b=batcher: b.queue_work)
            batcher.on_batch = self.batch_sentences.labels(model=name).observe

    def count_response(self, *, endpoint: str, status: int, seconds: float) -> None:
        """One answered (or, as 499, abandoned) request: its status, and its latency."""
        self.requests.labels(endpoint=endpoint, status=str(status)).inc()
        if status >= 400:
            self.errors.labels(status=str(status)).inc()
        self.latency.labels(endpoint=endpoint).observe(seconds)
