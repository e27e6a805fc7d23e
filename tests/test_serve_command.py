"""`nmt serve` (nmt/serve/command.py and server.py): its arguments, warnings and errors, the engines it
loads, a real server under 32 concurrent clients, SIGTERM that drains the queue or, after the grace,
gives up orphaned work."""

from __future__ import annotations

import argparse
import signal
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("fastapi", reason="nmt[serve] not installed (pip install 'nmt[serve]')")
from fastapi.testclient import TestClient  # noqa: E402
from serve_fixtures import LONG, SENTENCES, Server, request  # noqa: E402

from nmt.cli import main  # noqa: E402
from nmt.infer.translate import Translator  # noqa: E402
from nmt.serve.app import create_app  # noqa: E402
from nmt.serve.command import add_serve_args, build_models  # noqa: E402


# ----------------------------------------------------------------------------------- shutdown
def long_requests(server: Server, n: int) -> list:
    """``n`` requests with different beams (so never one batch), sent from threads; returns the
    futures of their (status, body) or the error their client saw."""

    def send(beam: int):
        try:
            return request(server.url + "/translate", {"text": LONG, "beam": beam}, timeout=120)
        except Exception as e:  # noqa: BLE001  (the connection closed without an answer)
            return e

    pool = ThreadPoolExecutor(n)
    futures = [pool.submit(send, 4 + i) for i in range(n)]
    pool.shutdown(wait=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until the worker holds one and the others wait
        metrics = urllib_get(server.url + "/metrics")
        waiting = [
            line for line in metrics.splitlines() if line.startswith('nmt_queue_sentences{model="tiny"}')
        ]
        if waiting and float(waiting[0].split()[-1]) >= (n - 1) * len(LONG):
            return futures
        time.sleep(0.1)
    raise AssertionError("the requests were not queued")


def urllib_get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read().decode()


def test_cli_warning_engine_and_errors(run_dir, tmp_path, monkeypatch, capsys):
    import inspect

    import uvicorn

    calls = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self: calls.append(self.config))
    assert main(["serve", f"en-de={run_dir}", "--host", "0.0.0.0", "--port", "8123"]) == 0
    assert calls[-1].host == "0.0.0.0" and calls[-1].port == 8123
    assert (calls[-1].limit_concurrency, calls[-1].timeout_graceful_shutdown) == (256, 20.0)
    assert calls[-1].http.keywords["shared"].read_timeout == 10.0  # nmt/serve/connections.py
    assert "warning: listening on 0.0.0.0" in capsys.readouterr().err
    options = ["--max-connections", "8", "--shutdown-grace", "5", "--read-timeout", "2.5"]
    assert main(["serve", str(run_dir), *options, "--allow-origin", "https://a.example:443"]) == 0
    assert (calls[-1].limit_concurrency, calls[-1].timeout_graceful_shutdown) == (8, 5.0)
    assert calls[-1].http.keywords["shared"].read_timeout == 2.5
    for bad in (
        ["--timeout", "0"],
        ["--read-timeout", "0"],
        ["--max-request-work", "0"],
        ["--max-body-bytes", "-1"],
        ["--allowed-hosts", ","],
        ["--allow-origin", "a.example"],
        ["--allow-origin", "https://a.example/page"],
    ):
        assert main(["serve", str(run_dir), *bad]) == 2
        assert f"nmt serve: error: {bad[0]} " in capsys.readouterr().err
    key = tmp_path / "key"
    key.write_text("k\n")
    assert main(["serve", str(run_dir), "--host", "0.0.0.0", "--api-key-file", str(key)]) == 0
    assert "warning" not in capsys.readouterr().err
    key.write_text("\n")
    assert main(["serve", str(run_dir), "--api-key-file", str(key)]) == 2
    assert f"nmt serve: error: {key}: line 1: empty API key" in capsys.readouterr().err
    assert main(["serve", str(tmp_path / "nope")]) == 2
    assert "no such checkpoint" in capsys.readouterr().err
    assert main(["serve", f"a={run_dir}", f"a={run_dir}"]) == 2
    assert "given twice" in capsys.readouterr().err
    assert main(["serve", str(run_dir), "--max-batch-tokens", "0"]) == 2
    if "engine" not in inspect.signature(Translator.load).parameters:
        assert main(["serve", str(run_dir), "--engine", "ctranslate2"]) == 2
        assert "--engine ctranslate2: this nmt has no ctranslate2 engine" in capsys.readouterr().err


def test_real_server_32_clients_and_sigterm_drain(run_dir, tmp_path):
    hold = tmp_path / "hold"  # while it exists, a search waits at its first step for the signal
    options = ("--max-wait-ms", "10", "--shutdown-grace", "60")
    server = Server(f"tiny={run_dir}", *options, log=tmp_path / "serve.log", hold=hold)
    try:
        single = {}
        for s in SENTENCES:  # one request at a time: the reference
            status, body = request(server.url + "/translate", {"text": s})
            assert status == 200
            single[s] = body["translations"][0]["text"]

        def client(i: int) -> list[tuple[str, int, str]]:
            out = []
            for j in range(5):
                s = SENTENCES[(i + j) % len(SENTENCES)]
                status, body = request(server.url + "/translate", {"text": s})
                out.append((s, status, body["translations"][0]["text"] if status == 200 else body))
            return out

        with ThreadPoolExecutor(32) as pool:
            results = [r for rs in pool.map(client, range(32)) for r in rs]
        assert len(results) == 160
        assert [r for r in results if r[1] != 200] == []
        assert [r for r in results if r[2] != single[r[0]]] == []
        metrics = urllib.request.urlopen(server.url + "/metrics").read().decode()
        batches = [line for line in metrics.splitlines() if line.startswith("nmt_batch_sentences_count")]
        assert batches and float(batches[0].split()[-1]) < 160 + len(SENTENCES)  # requests were batched
        # SIGTERM while a long request is in flight (for certain: its search waits at its first
        # step until the signal has come): it is answered, then the server exits
        searched = server.log.read_text().count("nmt-test: encode")
        hold.touch()
        with ThreadPoolExecutor(1) as pool:
            long = pool.submit(request, server.url + "/translate", {"text": SENTENCES * 15, "beam": 8})
            deadline = time.monotonic() + 60
            while server.log.read_text().count("nmt-test: encode") == searched:  # not searched yet
                assert time.monotonic() < deadline, "the long request was never searched"
                time.sleep(0.01)
            server.proc.send_signal(signal.SIGTERM)
            status, body = long.result(timeout=60)
        assert status == 200 and len(body["translations"]) == len(SENTENCES) * 15
        assert server.proc.wait(timeout=30) == 0
    finally:
        server.stop()


def test_an_exported_ctranslate2_directory_is_served(run_dir, tmp_path):
    """`nmt serve EXPORT --engine ctranslate2` serves a directory of `nmt export ctranslate2` (which
    Translator.load takes): /models gives the export's model config, /translate translates."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    export = tmp_path / "ct2"
    assert main(["export", "ctranslate2", str(run_dir), str(export)]) == 0
    parser = argparse.ArgumentParser()
    add_serve_args(parser)
    args = parser.parse_args([f"ct2={export}", "--engine", "ctranslate2"])
    models = build_models({"ct2": export}, args)
    expected = Translator.load(export, engine="ctranslate2").translate([SENTENCES[0]])
    with TestClient(create_app(models)) as c:
        info = c.get("/models").json()["models"][0]
        assert (info["name"], info["checkpoint"], info["vocabulary_size"]) == ("ct2", "ct2", 120)
        assert info["config"]["model"]["d_model"] == 32
        r = c.post("/translate", json={"text": SENTENCES[0]})
        assert r.status_code == 200 and r.json()["translations"][0]["text"] == expected[0]


def test_sigterm_gives_up_orphaned_work_after_the_grace_and_a_second_signal_stops_at_once(run_dir, tmp_path):
    """Searches made slow (0.5 s per decoding step; the log names each search): one request runs,
    three wait. SIGTERM with --shutdown-grace 1: the server exits (status 0) without searching the
    three waiting requests, whose clients it has given up. A new server, SIGTERM with a 60 s grace,
    then a second SIGTERM: it stops at once (status 1)."""
    log = tmp_path / "a.log"
    server = Server(f"tiny={run_dir}", "--shutdown-grace", "1", log=log, step_delay=0.5)
    # the second server starts while the first one works (on another port: the first one holds its own)
    second = Server(
        f"tiny={run_dir}", "--shutdown-grace", "60", log=tmp_path / "b.log", step_delay=0.5, wait=False
    )
    try:
        try:
            futures = long_requests(server, 4)
            server.proc.send_signal(signal.SIGTERM)
            assert server.proc.wait(timeout=60) == 0
            assert [f.result(timeout=60)[0] for f in futures if isinstance(f.result(timeout=60), tuple)] == []
            assert log.read_text().count("nmt-test: encode") == 1  # the running search only
        finally:
            server.stop()
        log, server = second.log, second
        server.wait_until_up()
        long_requests(server, 4)
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(1)
        assert server.proc.poll() is None  # the first signal waits for the requests in flight
        start = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=60) == 1
        assert time.monotonic() - start < 20
        assert "stopped at once (second signal)" in log.read_text()
        assert log.read_text().count("nmt-test: encode") == 1
    finally:
        second.stop()
