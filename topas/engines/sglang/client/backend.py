"""`backend=sglang`: one run on a real SGLang 0.5.23 server (conf/backend/sglang.yaml).

    python run.py backend=sglang model=tiny_cpu scheduler=topas workload=dag4 workload.num_tasks=3

`run_sglang(ctx)` (the runner's backend entry, `topas.config.BACKENDS["sglang"]`):
1. resolves the profile (`auto`: `gpu` when `nvidia-smi` lists a GPU, else `cpu`), the
   model folder (dummy weights from the model config's HF `config.json` unless
   `model_path` is given), the token scale (`token_scale: null` = automatic, see
   topas/workloads/scaling.py) and the cost model handed to the policy inside the server;
2. starts `sglang.launch_server` on 127.0.0.1 (free port) with the topas plugin running
   `ctx.scheduler` (name + params), its decision log, iteration log and server log in
   the run folder (`decisions.jsonl`, `iterations.jsonl`, `server.log`);
3. sends a few warm-up requests (invisible to the policy) and empties the prefix cache;
4. replays the (scaled) trace with the driver (`driver.py`), telling `ctx.progress` of
   every finished task, while watching the server process;
5. stops the server (its whole process group) on every exit path: success, driver
   error, server crash, Ctrl-C;
6. returns the `RunRecord` (records.py) and the replay's wall time.

Errors are one line: `ConfigError` for what the user can fix (bad option, sglang not
installed, a call that does not fit the model), `SGLangRunError` (a ValueError, so the
CLI prints it as one line) when the server fails to start or dies, or a request fails;
both name the server log.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from topas.config import ConfigError
from topas.engines.sglang.client.backend_config import (  # noqa: F401 - SGLangBackendConfig: conf/backend/sglang.yaml's schema (topas.config)
    PINNED_SGLANG,
    SGLangBackendConfig,
    check_config,
    model_dir,
    resolve_cost_model,
    resolve_profile,
    resolve_token_scale,
    server_args,
    sglang_version,
)
from topas.engines.sglang.client.shared_server import ServerLease, reset_logs, server_key
from topas.results import RunRecord

if TYPE_CHECKING:
    from topas.engines.sglang.client.driver import DriverConfig
    from topas.engines.sglang.client.server import ServerConfig

WARMUP_IDS = (0, 1, 2)  # below driver.TOKEN_ID_OFFSET: never a prefix of a replayed prompt
DEATH_GRACE_S = 5.0  # after a failed request: how long the server may take to be seen dead


class SGLangRunError(ValueError):
    """The server failed to start, died, or a request failed (one line, names the log)."""

    def __init__(self, message: str) -> None:
        # causes quoted in the message (a connection error, a log tail) may span lines
        super().__init__(" ".join(str(message).split()))


def _log_hint(srv, shown: Path | None = None) -> str:
    """The server log's most telling last line, and where the log is kept (`shown`: the run
    folder's copy when the server is a kept one)."""
    from topas.engines.sglang.client.server_log import last_line

    last = last_line(srv.log_path) if srv.log_path else ""
    return f"{last + ' ' if last else ''}(log: {shown or srv.log_path})"


def warm_up(srv, n: int, timeout: float = 600.0) -> None:
    """`n` short requests the policy does not see (no hint), then an empty prefix cache."""
    for i in range(n):
        srv.post(
            "/generate",
            {
                "rid": f"topas-warmup-{os.getpid()}-{i}",
                "input_ids": list(WARMUP_IDS) * 4,
                "sampling_params": {"max_new_tokens": 4, "ignore_eos": True, "temperature": 0.0},
            },
            timeout=timeout,
        )
    if n:
        flush_when_idle(srv)


def flush_when_idle(srv, timeout_s: float = 30.0) -> bool:
    """/flush_cache, retried while SGLang answers 400 (requests still finishing)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            srv.flush_cache()
            return True
        except Exception as e:  # noqa: BLE001 - a non-empty cache only shifts the first hits
            if time.monotonic() > deadline:
                print(f"warning: sglang backend: /flush_cache failed: {e}", file=sys.stderr)
                return False
            time.sleep(0.2)


async def _replay_watched(srv, trace, dcfg, meta: dict, timeout_s: float | None, log: Path | None = None) -> list[dict]:
    """The driver's replay, failing fast when the server process dies."""
    from topas.engines.sglang.client.driver import run_trace

    job = asyncio.ensure_future(run_trace(trace, dcfg, meta))
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while True:
            done, _ = await asyncio.wait({job}, timeout=0.5)
            if done:
                return job.result()
            if not srv.alive():
                rc = srv.proc.poll() if srv.proc is not None else None
                raise SGLangRunError(f"sglang server died during the replay (exit code {rc}): {_log_hint(srv, log)}")
            if deadline is not None and time.monotonic() > deadline:
                raise SGLangRunError(f"replay not finished after replay_timeout_s={timeout_s:g} s: {_log_hint(srv, log)}")
    finally:
        if not job.done():
            job.cancel()
            try:
                await job
            except BaseException:  # noqa: BLE001 - cancelled or failed: the reason is raised above
                pass



def _died(srv, within_s: float) -> bool:
    """True when the server process exits within `within_s` (a request that failed because the
    scheduler crashed often fails before the launcher has noticed and exited)."""
    deadline = time.monotonic() + within_s
    while srv.alive():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _check_profile(b: SGLangBackendConfig, profile: str, model) -> None:
    if profile != "cpu":
        return
    if b.enable_hierarchical_cache:
        raise ConfigError("backend (sglang): enable_hierarchical_cache needs CUDA (profile cpu)")
    if model.params_b > 1.0:
        raise ConfigError(
            f"backend (sglang): model {model.name} ({model.params_b:g}B parameters) on the CPU profile; "
            "use model=tiny_cpu, or a GPU (backend.profile=gpu)"
        )


def _check_outputs(calls: list[dict], log: Path) -> None:
    """Exact output lengths (ignore_eos): anything else is a server problem."""
    for c in calls:
        if int(c["output_tokens"]) != int(c["expected_output_tokens"]):
            raise SGLangRunError(
                f"request {c['rid']}: {c['output_tokens']} output tokens, expected {c['expected_output_tokens']} "
                f"(finish reason {c.get('finish_reason')}); log: {log}"
            )


@dataclass
class RunSetup:
    """What a run resolves before it starts a server (step 1 of the module docstring)."""

    backend: SGLangBackendConfig
    python: str  # the interpreter that runs sglang
    profile: str  # "cpu" | "gpu"
    model_dir: Path
    server_kw: dict[str, Any]  # ServerConfig keyword arguments
    extra_args: list[str]  # extra launch arguments
    token_scale: float
    trace: Any  # the trace as replayed (scaled by token_scale and time_scale)
    version: str | None  # the installed sglang's
    costs: dict[str, Any] | None  # the cost model handed to the policy inside the server
    policy: str  # the scheduler the plugin runs
    policy_params: dict[str, Any]


def resolve_setup(ctx) -> RunSetup:
    """Check the options and sglang's install; resolve profile, model folder, token scale and cost model."""
    from topas.engines.sglang.client.server import SGLangNotInstalled, check_sglang_importable
    from topas.workloads.scaling import scale_trace

    b: SGLangBackendConfig = ctx.backend
    check_config(b)
    python = b.python or sys.executable
    try:
        check_sglang_importable(python)
    except SGLangNotInstalled as e:
        raise ConfigError(str(e)) from None
    profile = resolve_profile(b)
    _check_profile(b, profile, ctx.model)
    mdir = model_dir(b, ctx.model)
    kw, extra = server_args(b, profile)
    scale = resolve_token_scale(b, ctx.trace, ctx.model, kw["max_total_tokens"])
    trace = scale_trace(ctx.trace, scale, b.time_scale)
    if scale != 1.0 and b.token_scale is None:
        print(f"sglang backend: token_scale {scale:g} (automatic, model {ctx.model.name}); "
              "set backend.token_scale to choose", file=sys.stderr)
    version = sglang_version(python)
    if version is not None and version != PINNED_SGLANG:
        print(f"warning: sglang {version} installed; this backend is pinned to {PINNED_SGLANG}", file=sys.stderr)
    costs = resolve_cost_model(b, profile, ctx.model, ctx.gpu)
    return RunSetup(b, python, profile, mdir, kw, extra, scale, trace, version, costs,
                    ctx.scheduler.name, dict(ctx.scheduler.params or {}))


def server_config(setup: RunSetup, logs: dict[str, Path]) -> ServerConfig:
    """The server of this run, its logs in `logs`."""
    from topas.engines.sglang.client.server import ServerConfig

    return ServerConfig(
        model_path=setup.model_dir, extra_args=setup.extra_args, policy=setup.policy, policy_params=setup.policy_params,
        decision_log=logs["decisions"], iteration_log=logs["iterations"], log_path=logs["server"],
        cost_model=setup.costs, python=setup.python, **setup.server_kw,
    )


def driver_config(setup: RunSetup, ctx) -> DriverConfig:
    """The driver's settings; its `base_url` is set once the server is up."""
    from topas.engines.sglang.client.driver import DriverConfig

    b = setup.backend
    return DriverConfig(
        base_url="http://unset",
        vocab_size=_vocab_size(setup.model_dir, ctx.model),
        hint_channel=b.hint_channel,
        request_timeout_s=b.request_timeout_s,
        stream=b.stream,
        on_task_done=(lambda _tid: ctx.progress(1)) if ctx.progress is not None else None,
        reuse_bounds=False,
    )


def start_or_switch(srv, fresh: bool, setup: RunSetup, run_log: Path) -> None:
    """Start a fresh server, or give a kept one a fresh policy instance (the plugin forgets the last replay)."""
    from topas.engines.sglang.client.server import SGLangServerError

    try:
        if fresh:
            srv.start()
        else:
            srv.set_policy(setup.policy, setup.policy_params)
    except SGLangServerError as e:
        raise SGLangRunError(str(e).replace(str(srv.log_path), str(run_log))) from None
    except OSError as e:  # the kept server did not answer the policy switch
        raise SGLangRunError(f"policy switch on the kept server failed: {e}: {_log_hint(srv, run_log)}") from None


def prepare_for_replay(srv, fresh: bool, b: SGLangBackendConfig, run_log: Path) -> None:
    """Warm-up requests on a fresh server; an empty prefix cache either way."""
    try:
        warm_up(srv, b.warmup_requests if fresh else 0, timeout=b.request_timeout_s)
        if not fresh:
            flush_when_idle(srv)
    except OSError as e:  # ServerRequestError: an error status or no answer
        raise SGLangRunError(f"warm-up request failed: {e}: {_log_hint(srv, run_log)}") from None


def replay(srv, trace, dcfg, meta: dict[str, Any], b: SGLangBackendConfig, run_log: Path) -> list[dict]:
    """The driver's replay of `trace`; a failed request is reported with the server's state."""
    from topas.engines.sglang.client.driver import DriverError

    try:
        return asyncio.run(_replay_watched(srv, trace, dcfg, meta, b.replay_timeout_s, run_log))
    except DriverError as e:
        if _died(srv, DEATH_GRACE_S):
            raise SGLangRunError(f"sglang server died during the replay ({e}): {_log_hint(srv, run_log)}") from None
        raise SGLangRunError(f"{e} {_log_hint(srv, run_log)}") from None


def serve_and_replay(lease: ServerLease, setup: RunSetup, ctx, meta: dict[str, Any], run_log: Path) -> list[dict]:
    """Steps 2-5: start (or switch) the server, warm up, replay; the lease keeps or stops the
    server on every exit path (a kept server only after a successful replay)."""
    srv, fresh = lease.server, lease.fresh
    dcfg = driver_config(setup, ctx)
    keep = False
    try:
        start_or_switch(srv, fresh, setup, run_log)
        dcfg.base_url = srv.base_url
        prepare_for_replay(srv, fresh, setup.backend, run_log)
        calls = replay(srv, setup.trace, dcfg, meta, setup.backend, run_log)
        keep = True
    except KeyboardInterrupt:
        srv.stop()
        raise SGLangRunError(f"interrupted; the sglang server was stopped (log: {run_log})") from None
    finally:
        lease.release(keep)
    return calls


def decision_log(files: dict[str, Path], lease: ServerLease) -> list[dict]:
    """The run's decision log, led by the plugin's `start` event (a kept server logged it during its first run)."""
    from topas.engines.sglang.jsonl import read_jsonl

    decisions = read_jsonl(files["decisions"])
    if not any(d.get("event") == "start" for d in decisions):
        start = lease.start_event()
        decisions = ([start] if start else []) + decisions
    return decisions


def engine_facts(setup: RunSetup, srv, fresh: bool) -> dict[str, Any]:
    """The run's facts about the real engine, for the summary."""
    b = setup.backend
    engine = {
        "sglang_version": setup.version,
        "profile": setup.profile,
        "token_scale": setup.token_scale,
        "time_scale": b.time_scale,
        "server_startup_s": round(srv.startup_s, 3) if fresh and srv.startup_s is not None else 0.0,
        "server_reused": not fresh,
        "hint_channel": b.hint_channel,
    }
    if not b.enable_hierarchical_cache:
        engine["swap_out_bytes"] = 0  # no host tier; with HiCache the write-back volume is not observable
    return engine


def run_sglang(ctx) -> tuple[RunRecord, float]:
    """Run `ctx.trace` on a real SGLang server with `ctx.scheduler` as the policy."""
    from topas.engines.sglang.client.records import sglang_record
    from topas.engines.sglang.client.server import SGLangServer
    from topas.engines.sglang.jsonl import read_jsonl

    setup = resolve_setup(ctx)
    files = reset_logs(Path(ctx.out_dir))
    run_log = files["server"]  # where errors point: the run folder's server log (a kept server's is copied there)
    key = server_key(server_config(setup, files)) if setup.backend.reuse_server else None
    lease = ServerLease(lambda logs: SGLangServer(server_config(setup, logs)), files, key)
    meta: dict[str, Any] = {}
    calls = serve_and_replay(lease, setup, ctx, meta, run_log)
    with open(files["calls"], "w", encoding="utf-8") as f:
        for c in calls:
            f.write(json.dumps(c) + "\n")
    _check_outputs(calls, files["server"])
    record = sglang_record(
        setup.trace, calls, meta["t0_wall"], ctx.warmup_fraction, decisions=decision_log(files, lease),
        iterations=read_jsonl(files["iterations"]), engine=engine_facts(setup, lease.server, lease.fresh),
    )
    return record, float(meta.get("wall_s", math.nan))


def _vocab_size(mdir: Path, model) -> int:
    try:
        return int(json.loads((mdir / "config.json").read_text())["vocab_size"])
    except (OSError, ValueError, KeyError):
        return int(model.vocab_size)
