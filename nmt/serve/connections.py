"""The HTTP connections of `nmt serve`: uvicorn's h11 protocol with a read deadline, and
--max-connections counted over the requests being answered.

A connection has ``read_timeout`` seconds (--read-timeout) from its opening, and from each answer
it was sent, to send a whole request, headers and body; then it is closed. The bytes that come in do
not move the deadline: a client that sends one byte every few seconds (slowloris) is closed as one
that sends nothing. While its request is answered (a long search) a connection has no deadline.

uvicorn's own limit_concurrency counts open connections, idle ones included, so a few hundred
connections that send nothing made every other client get 503 for as long as they stayed open.
Here a request counts from when it has come in whole (headers and body) to its answer, and one
that comes in whole while ``limit_concurrency`` (--max-connections) are counted is answered
uvicorn's 503; connections that are idle or still sending do not count (the read deadline closes
them). The decision is taken as each request comes in, one at a time, so that of a burst exactly
those over the limit are refused; a request whose body came in after its handler had started
reading it cannot be refused any more and is counted even over the limit."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass

from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.h11_impl import H11Protocol


@dataclass
class Connections:
    """What the connections of one server share: the read deadline (seconds) and the number of
    requests being answered."""

    read_timeout: float
    answering: int = 0


class DeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol with the read deadline and the limit of the module's docstring."""

    def __init__(self, config, server_state, app_state, _loop=None, *, shared: Connections):
        super().__init__(config, server_state, app_state, _loop)
        self.shared = shared
        self.max_answering = self.limit_concurrency
        self.limit_concurrency = None  # uvicorn's check counts idle connections: see decide()
        self.inner_app, self.app = self.app, self.admitted
        self.read_deadline: asyncio.TimerHandle | None = None
        self.started = self.decided = None  # the cycles whose handler started, whose admission is decided
        self.refused = self.answering = False

    def arm(self) -> None:
        """Starts the read deadline (the next request's whole time to come in)."""
        self.disarm()
        self.read_deadline = self.loop.call_later(self.shared.read_timeout, self.read_timed_out)

    def disarm(self) -> None:
        if self.read_deadline is not None:
            self.read_deadline.cancel()
            self.read_deadline = None

    def read_timed_out(self) -> None:
        """The request did not come in whole in time: the connection is closed (the request's
        handler, if it waits for the rest of a body, sees the client gone)."""
        self.read_deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def count(self, answering: bool) -> None:
        """This connection's request counted among those being answered, or no more."""
        if answering != self.answering:
            self.answering = answering
            self.shared.answering += 1 if answering else -1

    def decide(self, cycle) -> None:
        """A request has come in whole: no deadline while it is answered; it is counted, or, when
        ``max_answering`` are and its handler has not started, refused (admitted() answers 503)."""
        self.disarm()
        self.decided = cycle
        full = self.max_answering is not None and self.shared.answering >= self.max_answering
        self.refused = full and self.started is not cycle
        self.count(not self.refused)

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self.arm()

    def connection_lost(self, exc) -> None:
        self.disarm()
        self.count(False)
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        cycle = self.cycle
        if (
            cycle is not None
            and not cycle.more_body
            and not cycle.response_complete
            and self.decided is not cycle
        ):
            self.decide(cycle)

    def on_response_complete(self) -> None:
        self.count(False)
        if not self.transport.is_closing():
            self.arm()  # before uvicorn takes a pipelined request, which disarms it again if whole
        super().on_response_complete()

    def handle_websocket_upgrade(self, event) -> None:
        self.disarm()  # the connection is another protocol's from now on
        super().handle_websocket_upgrade(event)

    async def admitted(self, scope, receive, send) -> None:
        """The app, or uvicorn's 503 for a request decide() refused."""
        self.started = cycle = self.cycle
        if self.decided is cycle and self.refused:
            self.logger.warning("Exceeded concurrency limit.")
            return await service_unavailable(scope, receive, send)
        await self.inner_app(scope, receive, send)


def http_protocol(read_timeout: float) -> functools.partial:
    """The ``http`` of one server's uvicorn.Config: a DeadlineProtocol per connection, all sharing
    one Connections."""
    return functools.partial(DeadlineProtocol, shared=Connections(read_timeout))
