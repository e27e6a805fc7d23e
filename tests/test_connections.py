"""nmt/serve/connections.py on a real `nmt serve`: a connection that has not sent a whole request
within --read-timeout of its opening or of its last answer is closed, however it drips its bytes,
and idle connections, more than --max-connections, keep no client from its answer; an answer that
takes longer than the read timeout is not cut, and --max-connections counts the requests being
answered. A body over --max-body-bytes sent chunked (no Content-Length) is a 413 that closes the
connection."""

from __future__ import annotations

import http.client
import json
import select
import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("fastapi", reason="nmt[serve] not installed (pip install 'nmt[serve]')")
from serve_fixtures import SENTENCES, Server, request  # noqa: E402

READ_TIMEOUT = 1.5
DRIP = 0.25  # seconds between two bytes of a slow client


@pytest.fixture(scope="module")
def server(run_dir, tmp_path_factory):
    log = tmp_path_factory.mktemp("connections") / "serve.log"
    options = ("--read-timeout", str(READ_TIMEOUT), "--max-connections", "4", "--max-body-bytes", "100000")
    s = Server(f"tiny={run_dir}", *options, log=log)
    yield s
    s.stop()


class Client:
    """A raw connection to the server: when it started, the bytes it drips (one every DRIP seconds)
    and how long after its start the server closed it (None: open)."""

    def __init__(self, port: int, drip: bytes = b""):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.start = time.monotonic()
        self.drip, self.sent, self.closed_after = drip, 0, None


def watch(clients: list[Client], seconds: float) -> None:
    """For ``seconds`` at most, until the server has closed every client: each client drips its
    bytes, and the time the server closes it is noted."""
    end, next_drip = time.monotonic() + seconds, 0.0
    while time.monotonic() < end and any(c.closed_after is None for c in clients):
        open_clients = [c for c in clients if c.closed_after is None]
        if time.monotonic() >= next_drip:
            for c in open_clients:
                if c.sent < len(c.drip):
                    try:
                        c.sent += c.sock.send(c.drip[c.sent : c.sent + 1])
                    except OSError:  # closed meanwhile: recv says so below
                        pass
            next_drip = time.monotonic() + DRIP
        readable = select.select([c.sock for c in open_clients], [], [], 0.05)[0]
        for c in open_clients:
            if c.sock in readable:
                try:
                    data = c.sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    c.closed_after = time.monotonic() - c.start
    for c in clients:
        c.sock.close()


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The status, headers (lower-case names) and body of one HTTP response with a Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed before the answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "the connection closed in the body"
        body += chunk
    return int(status_line.split()[1]), headers, body


def test_connections_that_send_nothing_or_drip_are_closed_at_the_read_deadline_and_block_no_one(server):
    """--max-connections 4: 12 connections that send nothing, one that drips its headers, 6 whose
    handlers wait for the rest of a body they drip, and one that drips its second request after an
    answer. Meanwhile other clients are answered; each of these is closed 1.5 s (--read-timeout)
    after it opened or had its answer, although its bytes keep coming. The slow clients drip from the
    moment they open (a thread watches them while the others are answered): how long those answers
    take on a loaded machine changes nothing."""
    idle = [Client(server.port) for _ in range(12)]
    headers = Client(server.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Slow: yes\r\n" * 20)
    bodies = [Client(server.port, b" " * 100) for _ in range(6)]
    for body in bodies:
        body.sock.sendall(
            b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n{"
        )
    with ThreadPoolExecutor(2) as pool:
        watching = [pool.submit(watch, [*idle, headers, *bodies], READ_TIMEOUT + 10)]
        kept = Client(server.port, b"GET /health HTTP/1.1\r\n" + b"X-Slow: yes\r\n" * 20)
        kept.sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert read_response(kept.sock)[0] == 200
        kept.start = time.monotonic()  # its deadline runs from its answer
        watching.append(pool.submit(watch, [kept], READ_TIMEOUT + 10))
        assert [request(server.url + "/health")[0] for _ in range(3)] == [200, 200, 200]
        status, answer = request(server.url + "/translate", {"text": SENTENCES[0]})
        assert status == 200 and answer["translations"][0]["text"]
        for w in watching:
            w.result()
    clients = [*idle, headers, *bodies, kept]
    closed = [c.closed_after for c in clients]
    assert None not in closed, f"still open after {READ_TIMEOUT + 10} s: {closed}"
    assert all(READ_TIMEOUT - 0.1 <= t < READ_TIMEOUT + 5 for t in closed), closed
    # the slow ones were still sending (one byte every DRIP seconds) when they were closed
    assert min(c.sent for c in [headers, *bodies, kept]) >= 4
    assert request(server.url + "/health")[0] == 200


def test_a_chunked_body_over_max_body_bytes_is_a_413_and_the_connection_closes(server):
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(
        b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    try:
        for _ in range(64):  # 256 KiB of a body that never ends (no last chunk)
            sock.sendall(b"1000\r\n" + b" " * 4096 + b"\r\n")
    except OSError:  # the server has answered and closed already
        pass
    status, headers, body = read_response(sock)
    assert status == 413 and headers["connection"] == "close"
    assert json.loads(body)["error"]["message"] == "request body over 100,000 bytes (--max-body-bytes)"
    try:
        assert sock.recv(65536) == b""
    except ConnectionResetError:  # closed with the rest of the body unread
        pass
    sock.close()


def health_status(server: Server) -> int:
    try:
        with urllib.request.urlopen(server.url + "/health", timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_an_answer_longer_than_the_read_timeout_is_kept_and_max_connections_counts_requests(
    run_dir, tmp_path
):
    """Searches made slow (0.15 s per decoding step: ~18 steps, ~2.7 s an answer), --read-timeout 1: an
    answer that takes longer is sent, and the connection then serves the next request. With
    --max-connections 2, two requests being answered make a third uvicorn's 503, and once they are
    answered it is served."""
    options = ("--read-timeout", "1", "--max-connections", "2")
    server = Server(f"tiny={run_dir}", *options, log=tmp_path / "serve.log", step_delay=0.15)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        start = time.monotonic()
        conn.request(
            "POST", "/translate", json.dumps({"text": SENTENCES[0]}), {"Content-Type": "application/json"}
        )
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read())["translations"][0]["text"]
        assert time.monotonic() - start > 1
        conn.request("GET", "/health")  # the same connection
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read())["status"] == "ok"
        conn.close()
        with ThreadPoolExecutor(2) as pool:
            slow = [pool.submit(request, server.url + "/translate", {"text": SENTENCES[0]}) for _ in range(2)]
            # no check until both have come in (a check answered meanwhile would take a place); each
            # takes as long as the first at least
            time.sleep(1)
            deadline = time.monotonic() + 30
            while health_status(server) != 503:
                assert time.monotonic() < deadline, "never two requests answered at once"
                time.sleep(0.05)
            assert [f.result(timeout=60)[0] for f in slow] == [200, 200]
        assert health_status(server) == 200
        assert "Exceeded concurrency limit." in server.log.read_text()
    finally:
        server.stop()
