"""Start, health-check and stop a real `sglang.launch_server` (0.5.23) as a subprocess.

    with SGLangServer(ServerConfig(policy="fcfs", log_path=run_dir / "server.log")) as srv:
        ...  # requests to srv.base_url

- Bound to 127.0.0.1 on a free port (ports.py); if another process takes it before the server binds
  it, the start is retried at once on another (the server would otherwise hang).
- Dummy weights from a local config folder (`--load-format dummy`) unless `load_format="auto"` and a real model path is given.
- `profile="cpu"`: the flags and environment that run the server on a CPU without a
  GPU (docs/sglang_integration.md): `SGLANG_USE_CPU_ENGINE=1`, `--device cpu
  --attention-backend torch_native --sampling-backend pytorch --grammar-backend none
  --disable-cuda-graph --disable-overlap-schedule`. `profile="gpu"`: SGLang's own defaults.
- The policy selection reaches the scheduler process through the environment
  (`TOPAS_POLICY`, `TOPAS_POLICY_PARAMS`, ... see ../plugin/hooks.py and ../plugin_env.py); no policy = plain SGLang.
- The server runs in its own process group (session); `stop()` terminates the whole
  group (SIGTERM, then SIGKILL after a grace period) plus any descendant that left it,
  and is called on every exit path of the context manager (exceptions, Ctrl-C) and at
  interpreter exit.
- Errors are one line: `SGLangNotInstalled`, `ServerStartError` (died during start-up,
  or not healthy in time; the message names the log file and quotes its last line),
  `ServerRequestError` (an OSError: a request got an error status or no answer).
- HTTP (health checks, `post`, `flush_cache`): one pooled `httpx.Client` per started server.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from topas.engines.sglang import plugin_env as _env
from topas.engines.sglang.client.http_client import request, sync_client
from topas.engines.sglang.client.ports import free_port
from topas.engines.sglang.client.processes import descendants, die_with_parent, stop_process_group
from topas.engines.sglang.client.server_log import BIND_ERROR, last_line, tail

TINY_CPU_MODEL = Path(__file__).resolve().parents[1] / "models" / "tiny_cpu"

CPU_FLAGS: tuple[str, ...] = (
    "--device", "cpu",
    "--attention-backend", "torch_native",
    "--sampling-backend", "pytorch",
    "--grammar-backend", "none",
    "--disable-cuda-graph",
    # sglang 0.5.23's overlap scheduler on CPU: with a full batch and a non-empty waiting
    # queue every decode step took ~100 ms (10 tok/s instead of ~400 tok/s, measured);
    # overlap is a GPU-stream optimisation with nothing to overlap on a CPU anyway.
    "--disable-overlap-schedule",
)
# OMP_NUM_THREADS=1: torch's default (one OpenMP thread per core) spins at barriers when
# another process holds a core; on the 2-core test machine with one busy neighbour a
# decode step of the tiny model went from ~2.4 ms to ~70 ms (15 vs 418 tok/s for one
# request, measured) and a start-up once missed a 240 s deadline. One thread is what the
# tiny model needs; ServerConfig.env can override it.
CPU_ENV: Mapping[str, str] = {"SGLANG_USE_CPU_ENGINE": "1", "OMP_NUM_THREADS": "1"}


class SGLangServerError(RuntimeError):
    pass


class SGLangNotInstalled(SGLangServerError):
    pass


class ServerStartError(SGLangServerError):
    pass


class PortInUse(ServerStartError):
    """The server could not bind its HTTP port (taken between our pick and its bind)."""


@dataclass
class ServerConfig:
    model_path: str | os.PathLike = TINY_CPU_MODEL
    load_format: str = "dummy"  # "auto" with a real checkpoint
    profile: str = "cpu"  # "cpu" | "gpu"
    host: str = "127.0.0.1"
    port: int | None = None  # None: a free port
    schedule_policy: str | None = "fcfs"  # SGLang's own waiting-queue policy (the plugin reorders after it)
    max_total_tokens: int | None = 4096  # KV pool size (tokens); None: SGLang sizes it
    max_running_requests: int | None = None
    chunked_prefill_size: int | None = None
    dtype: str | None = None
    skip_tokenizer_init: bool = True  # requests carry input_ids
    extra_args: Sequence[str] = ()  # passthrough, e.g. ("--tp-size", "2", "--enable-hierarchical-cache")
    # policy selection for the plugin (None: plain SGLang, the plugin stays inactive)
    policy: str | None = None
    policy_params: Mapping[str, Any] | None = None
    policy_modules: Sequence[str] = ()
    decision_log: str | os.PathLike | None = None
    iteration_log: str | os.PathLike | None = None  # per-iteration timeline (plugin.iteration_log.IterationLog)
    templates_file: str | os.PathLike | None = None
    cost_model: Mapping[str, Any] | None = None
    decision_trigger: str = "change"  # "change" | "pass" (../plugin/hooks.py)
    log_path: str | os.PathLike | None = None  # server stdout+stderr; None: a temp file
    startup_timeout_s: float = 240.0
    stop_timeout_s: float = 20.0
    python: str = sys.executable
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | os.PathLike | None = None

    def command(self, port: int) -> list[str]:
        cmd = [
            self.python, "-m", "sglang.launch_server",
            "--model-path", str(self.model_path),
            "--load-format", self.load_format,
            "--host", self.host,
            "--port", str(port),
        ]
        if self.profile == "cpu":
            cmd += list(CPU_FLAGS)
            if not any(a in ("--tp", "--tp-size", "--tensor-parallel-size") for a in self.extra_args):
                cmd += ["--tp", "1"]
        elif self.profile != "gpu":
            raise ValueError(f"ServerConfig.profile must be 'cpu' or 'gpu', got {self.profile!r}")
        if self.skip_tokenizer_init:
            cmd.append("--skip-tokenizer-init")
        for flag, value in (
            ("--schedule-policy", self.schedule_policy),
            ("--max-total-tokens", self.max_total_tokens),
            ("--max-running-requests", self.max_running_requests),
            ("--chunked-prefill-size", self.chunked_prefill_size),
            ("--dtype", self.dtype),
        ):
            if value is not None:
                cmd += [flag, str(value)]
        cmd += [str(a) for a in self.extra_args]
        return cmd

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        for k in list(env):  # never inherit a policy selection from the caller's shell
            if k.startswith("TOPAS_"):
                del env[k]
        if self.profile == "cpu":
            env.update(CPU_ENV)
        env.setdefault("PYTHONUNBUFFERED", "1")
        if self.policy:
            env[_env.ENV_POLICY] = self.policy
            env[_env.ENV_PARAMS] = json.dumps(dict(self.policy_params or {}))
            if self.policy_modules:
                env[_env.ENV_MODULES] = ",".join(str(m) for m in self.policy_modules)
            if self.decision_log:
                env[_env.ENV_DECISION_LOG] = str(Path(self.decision_log).resolve())
            if self.templates_file:
                env[_env.ENV_TEMPLATES] = str(Path(self.templates_file).resolve())
            env[_env.ENV_TRIGGER] = self.decision_trigger
            if self.cost_model:
                from topas.engines.sglang.costs import ENV_COST_MODEL

                env[ENV_COST_MODEL] = json.dumps(dict(self.cost_model))
        if self.iteration_log:  # also without a policy: a plain server's timeline (profiling)
            env[_env.ENV_ITERATION_LOG] = str(Path(self.iteration_log).resolve())
        env.update(self.env)
        return env


def check_sglang_importable(python: str = sys.executable) -> None:
    """One-line SGLangNotInstalled unless `python` can find sglang (without importing it)."""
    probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('sglang') else 3)"
    try:
        rc = subprocess.run([python, "-c", probe], capture_output=True, timeout=60).returncode
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SGLangNotInstalled(f"cannot run {python}: {e}") from None
    if rc != 0:
        raise SGLangNotInstalled(
            f"sglang is not importable by {python}: on a CPU machine run `make sglang-cpu`; "
            "on a GPU machine `pip install -e .[sglang]`"
        )


class SGLangServer:
    def __init__(self, config: ServerConfig | None = None) -> None:
        self.config = config or ServerConfig()
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.log_path: Path | None = None
        self.startup_s: float | None = None
        self._log_file = None
        self._log_from = 0
        self._http: httpx.Client | None = None
        self._atexit_registered = False

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise SGLangServerError("server not started")
        return f"http://{self.config.host}:{self.port}"

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> SGLangServer:
        cfg = self.config
        check_sglang_importable(cfg.python)
        model = Path(cfg.model_path)
        if cfg.load_format == "dummy" and not (model / "config.json").is_file():
            raise ServerStartError(f"--load-format dummy needs a config.json in {model}")
        if cfg.log_path is None:
            import tempfile

            fd, name = tempfile.mkstemp(prefix="sglang-server-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        else:
            self.log_path = Path(cfg.log_path)
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        tries_left = 1 if cfg.port else 3  # a port we picked can still be taken before the server binds it
        while True:
            try:
                return self._start_on(cfg.port or free_port(cfg.host))
            except PortInUse:
                tries_left -= 1
                if not tries_left:
                    raise

    def _start_on(self, port: int) -> SGLangServer:
        cfg = self.config
        self.port = port
        self._log_file = open(self.log_path, "ab")
        self._log_from = self._log_file.tell()  # a retry's log follows the failed try's
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            cfg.command(self.port),
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=cfg.environment(),
            cwd=str(cfg.cwd) if cfg.cwd else None,
            start_new_session=True,  # own process group: stop() takes every child with it
            preexec_fn=die_with_parent,  # and if this process is killed outright, the launcher is told
        )
        if not self._atexit_registered:
            atexit.register(self.stop)
            self._atexit_registered = True
        try:
            self._wait_healthy(t0)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def _wait_healthy(self, t0: float) -> None:
        cfg = self.config
        deadline = t0 + cfg.startup_timeout_s
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise ServerStartError(
                    f"sglang server exited with code {rc} during start-up: {last_line(self.log_path)} "
                    f"(log: {self.log_path})"
                )
            if self.healthy(timeout=2.0):
                return
            # uvicorn does not exit when its port is taken: it waits for a shutdown that never comes
            if BIND_ERROR in tail(self.log_path, since=self._log_from):
                raise PortInUse(
                    f"sglang server could not bind port {self.port}: address already in use (log: {self.log_path})"
                )
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"sglang server not healthy after {cfg.startup_timeout_s:.0f} s: {last_line(self.log_path)} "
                    f"(log: {self.log_path})"
                )
            time.sleep(0.25)

    def healthy(self, timeout: float = 2.0) -> bool:
        try:
            return self._client().get(f"{self.base_url}/health", timeout=timeout).status_code == 200
        except (httpx.HTTPError, OSError):
            return False

    def post(self, path: str, payload: Mapping[str, Any] | None = None, timeout: float = 600.0) -> Any:
        """POST JSON to the server; the decoded JSON answer (or text). `ServerRequestError`
        (one line) on an error status or no answer."""
        r = self._request("POST", path, json.dumps(dict(payload or {})).encode(), timeout)
        try:
            return r.json()
        except json.JSONDecodeError:
            return r.text

    def flush_cache(self) -> None:
        """Empty SGLang's prefix cache (only when no request is queued or running: else
        SGLang answers 400, a `ServerRequestError`). Pins held by the plugin die with the
        tree; it notices at its next decision."""
        self._request("POST", "/flush_cache", b"", 60.0)

    def _request(self, method: str, path: str, body: bytes, timeout: float) -> httpx.Response:
        return request(self._client(), self.base_url, method, path, body, timeout)

    def _client(self) -> httpx.Client:
        if self._http is None:  # per-request timeouts are given with each call
            self._http = sync_client(600.0)
        return self._http

    def set_policy(self, name: str, params: Mapping[str, Any] | None = None, timeout: float = 60.0) -> None:
        """Switch the plugin to a fresh instance of policy `name` through a one-token control
        request (`topas.control/v1`). Needs a server started with a policy (plugin active).
        With a decision log configured, waits until the plugin confirms the switch."""
        from topas.engines.sglang.hints import control_envelope

        if not self.config.policy:
            raise SGLangServerError("set_policy needs a server started with a policy (the plugin is inactive)")
        import uuid

        rid = f"topas-control-{uuid.uuid4().hex[:12]}"
        self.post(
            "/generate",
            {
                "rid": rid,
                "input_ids": [0],  # below the driver's token range (driver.TOKEN_ID_OFFSET)
                "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
                "kv_hints": control_envelope(name, params, message_id=rid),
            },
            timeout=timeout,
        )
        log = self.config.decision_log
        if not log:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in Path(log).read_text(encoding="utf-8").splitlines():
                rec = json.loads(line)
                if rec.get("rid") == rid:
                    if rec.get("event") == "policy":
                        return
                    raise SGLangServerError(f"policy switch to {name!r} refused: {rec.get('error')}")
            time.sleep(0.05)
        raise SGLangServerError(f"policy switch to {name!r} not confirmed in {log}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pids(self) -> list[int]:
        """The server's process and all its descendants (empty once stopped)."""
        if self.proc is None:
            return []
        return [self.proc.pid] + descendants(self.proc.pid)

    def stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        stop_process_group(proc, self.config.stop_timeout_s)
        self.proc = None
        if self._http is not None:
            self._http.close()
            self._http = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._atexit_registered:
            atexit.unregister(self.stop)
            self._atexit_registered = False

    def __enter__(self) -> SGLangServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
