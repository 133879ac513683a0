"""The client's HTTP and process handling without sglang: the driver against a fake
`/generate` server (plain and streamed answers, the in-flight bound, one-line errors), the
launcher's requests, stopping a process group with a descendant that left it, and a start whose
port is taken before the server binds it (a fake launcher)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from topas.engines.sglang.client.driver import DriverConfig, DriverError, run_trace_sync
from topas.engines.sglang.client.http_client import ServerRequestError
from topas.engines.sglang.client.processes import descendants, die_with_parent, processes_alive, stop_process_group
from topas.engines.sglang.client.server import ServerConfig, SGLangServer
from topas.engines.sglang.client.server_log import BIND_ERROR
from topas.workflow import Agent, CallNode, SegmentRef, Task, Trace, Workflow, template_of


class FakeSGLang(BaseHTTPRequestHandler):
    """/generate answers `max_new_tokens` ids after `delay_s`; counts concurrent requests."""

    delay_s = 0.05
    status = 200
    lock = threading.Lock()
    inflight = 0
    peak = 0
    bodies: list[dict] = []

    def log_message(self, *a):  # quiet
        pass

    def do_GET(self):
        self._send(200, b'{"ok": true}')

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        cls = type(self)
        if self.path == "/flush_cache":
            return self._send(cls.status, b"")
        req = json.loads(body)
        with cls.lock:
            cls.bodies.append(req)
            cls.inflight += 1
            cls.peak = max(cls.peak, cls.inflight)
        try:
            time.sleep(cls.delay_s)
            if cls.status != 200:
                return self._send(cls.status, b'{"error": "bad\nrequest"}')
            n = req["sampling_params"]["max_new_tokens"]
            ids = [7 + i for i in range(n)]
            meta = {"cached_tokens": 3, "completion_tokens": n, "finish_reason": {"type": "length"}}
            if not req.get("stream"):
                return self._send(200, json.dumps({"output_ids": ids, "meta_info": meta}).encode())
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for k in range(1, n + 1):  # cumulative output_ids, as SGLang streams by default
                self.wfile.write(f"data: {json.dumps({'output_ids': ids[:k], 'meta_info': meta})}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
        finally:
            with cls.lock:
                cls.inflight -= 1

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def fake():
    FakeSGLang.status, FakeSGLang.peak, FakeSGLang.bodies = 200, 0, []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeSGLang)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def fan(width: int = 6) -> Trace:
    """One task: a root call, then `width` calls that each read the root's output."""
    agents = {"A": Agent("A", 20)}
    nodes = {"r": CallNode("r", "A", 5, 4)}
    for i in range(width):
        nodes[f"c{i}"] = CallNode(f"c{i}", "A", 5, 3, deps=("r",), history=(SegmentRef("out", "r"),))
    wf = Workflow("fan", agents, nodes)
    return Trace("t", (Task(0, 0.0, wf, wf.name),), {wf.name: template_of(wf)})


@pytest.mark.parametrize("stream", [False, True])
def test_driver_replays_over_a_bounded_pool(fake, stream):
    recs = run_trace_sync(fan(), DriverConfig(base_url=fake, max_inflight=2, stream=stream, run_tag="x"))
    assert len(recs) == 7 and {r["output_tokens"] for r in recs} == {3, 4}
    assert all(r["cached_tokens"] == 3 and r["finish_reason"] == "length" for r in recs)
    assert all((r["first_token"] is not None) == stream for r in recs)
    assert FakeSGLang.peak == 2  # six calls ready at once, two in flight
    root_out = [7, 8, 9, 10]  # the root's answer follows the agent prefix in every child's prompt
    child = next(b for b in FakeSGLang.bodies if b["rid"] == "x-t0-c0")
    assert child["input_ids"][20:24] == root_out and child["kv_hints"]["actions"][0]["payload"]["node"] == "c0"


def test_driver_errors_are_one_line(fake):
    FakeSGLang.status = 400
    with pytest.raises(DriverError) as e:
        run_trace_sync(fan(1), DriverConfig(base_url=fake, run_tag="x"))
    assert str(e.value) == 'request x-t0-r: HTTP 400: {"error": "bad request"}'
    with pytest.raises(DriverError, match=r"^request x-t0-r: ConnectError: .*(refused|Connect call failed)"):
        run_trace_sync(fan(1), DriverConfig(base_url="http://127.0.0.1:9", run_tag="x"))
    FakeSGLang.status, FakeSGLang.delay_s = 200, 0.5
    try:
        with pytest.raises(DriverError, match=r"^request x-t0-r: ReadTimeout"):
            run_trace_sync(fan(1), DriverConfig(base_url=fake, run_tag="x", request_timeout_s=0.1))
        time.sleep(0.5)  # the fake server finishes that request before the next test changes it
    finally:
        FakeSGLang.delay_s = 0.05


def test_launcher_requests(fake):
    srv = SGLangServer(ServerConfig())
    srv.port = int(fake.rsplit(":", 1)[1])
    assert srv.healthy()
    assert srv.post("/generate", {"input_ids": [5], "sampling_params": {"max_new_tokens": 2}})["output_ids"] == [7, 8]
    srv.flush_cache()
    FakeSGLang.status = 400
    with pytest.raises(ServerRequestError, match="^POST /flush_cache: HTTP 400$") as e:
        srv.flush_cache()
    assert isinstance(e.value, OSError)  # what the backend catches around server requests
    srv.port = 9
    assert not srv.healthy()
    with pytest.raises(ServerRequestError, match="^POST /generate: ConnectError"):
        srv.post("/generate", {})


STRAY = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(60)"])
print(child.pid, flush=True)
time.sleep(60)
"""


def test_stop_process_group_takes_strays_and_leaves_no_process():
    proc = subprocess.Popen([sys.executable, "-c", STRAY], stdout=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=die_with_parent)
    stray = int(proc.stdout.readline())
    deadline = time.monotonic() + 10
    while stray not in descendants(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    family = [proc.pid] + descendants(proc.pid)
    assert stray in family and processes_alive(family) == family
    t = time.monotonic()
    stop_process_group(proc, grace_s=5)
    assert time.monotonic() - t < 5  # SIGTERM ends the leader at once; the stray (own session) is killed
    assert processes_alive(family) == [] and descendants(proc.pid) == []
    proc.stdout.close()


# Stands in for `python -m sglang.launch_server`: serves /health once bound; when its port is
# taken it logs asyncio's bind error as uvicorn does and, like uvicorn under sglang, never exits.
FAKE_LAUNCHER = """
import asyncio, sys
if sys.argv[1] == "-c":  # the importability probe
    sys.exit(0)
port = int(sys.argv[sys.argv.index("--port") + 1])

async def health(reader, writer):
    await reader.readuntil(b"\\r\\n\\r\\n")
    writer.write(b"HTTP/1.1 200 OK\\r\\nContent-Length: 0\\r\\nConnection: close\\r\\n\\r\\n")
    await writer.drain()
    writer.close()

async def main():
    try:
        server = await asyncio.start_server(health, "127.0.0.1", port)
    except OSError as e:
        print(f"ERROR:    {e}", flush=True)
        await asyncio.sleep(600)
        return
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""


def test_a_port_taken_before_the_server_binds_it_is_retried_on_another(tmp_path, monkeypatch):
    import socket

    from topas.engines.sglang.client import server as server_mod

    (tmp_path / "launcher.py").write_text(FAKE_LAUNCHER)
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} {tmp_path / "launcher.py"} "$@"\n')
    python.chmod(0o755)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        picks = iter([taken.getsockname()[1], server_mod.free_port()])
        monkeypatch.setattr(server_mod, "free_port", lambda host: next(picks))
        cfg = ServerConfig(python=str(python), log_path=tmp_path / "server.log", startup_timeout_s=60)
        t = time.monotonic()
        with SGLangServer(cfg) as srv:
            assert srv.port != taken.getsockname()[1] and srv.healthy()
        assert time.monotonic() - t < 30  # the first try ends at its bind error, not at the start-up timeout
        assert BIND_ERROR in (tmp_path / "server.log").read_text()
        cfg.port = taken.getsockname()[1]  # a port the caller chose is not replaced
        with pytest.raises(server_mod.PortInUse, match=f"could not bind port {cfg.port}"):
            SGLangServer(cfg).start()


def test_free_ports_are_below_the_kernels_ephemeral_range():
    from topas.engines.sglang.client.ports import _ephemeral_low, free_port

    assert all(free_port() < min(22000, _ephemeral_low()) for _ in range(20))
