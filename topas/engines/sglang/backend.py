"""`backend=sglang`: one run on a real SGLang 0.5.23 server (conf/backend/sglang.yaml).

    python run.py backend=sglang model=tiny_cpu scheduler=topas workload=dag4 workload.num_tasks=3

`run_sglang(ctx)` (the runner's backend entry, `topas.runner.BACKENDS["sglang"]`):
1. resolves the profile (`auto`: `gpu` when `nvidia-smi` lists a GPU, else `cpu`), the
   model folder (dummy weights from the model config's HF `config.json` unless
   `model_path` is given), the token scale (`token_scale: null` = automatic, see
   scaling.py) and the cost model handed to the policy inside the server;
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
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from topas.config import ConfigError
from topas.results import RunRecord

PINNED_SGLANG = "0.5.23"
PROFILES = ("auto", "cpu", "gpu")
HINT_CHANNELS = ("kv_hints", "custom_params", "both")
CPU_DEFAULT_POOL = 4096  # --max-total-tokens of the CPU profile when unset (DESIGN.md section 6)
WARMUP_IDS = (0, 1, 2)  # below driver.TOKEN_ID_OFFSET: never a prefix of a replayed prompt


class SGLangRunError(ValueError):
    """The server failed to start, died, or a request failed (one line, names the log)."""


@dataclass
class SGLangBackendConfig:
    name: str = "sglang"
    profile: str = "auto"  # auto | cpu | gpu (auto: gpu when nvidia-smi lists a GPU)
    model_path: Optional[str] = None  # None: dummy weights from the model config's hf_config folder
    load_format: Optional[str] = None  # None: "dummy" without model_path, "auto" with it
    dtype: Optional[str] = None  # SGLang --dtype (None: the model's)
    max_total_tokens: Optional[int] = None  # KV pool (tokens); None: SGLang sizes it (cpu profile: 4096)
    mem_fraction_static: Optional[float] = None
    chunked_prefill_size: Optional[int] = None
    max_running_requests: Optional[int] = None
    schedule_policy: str = "fcfs"  # SGLang's own queue order, before the plugin rewrites it
    enable_hierarchical_cache: bool = False  # HiCache host tier (CUDA only)
    hicache_ratio: Optional[float] = None  # host pool / device pool (SGLang default 2.0)
    tp_size: int = 1  # the plugin runs one policy per scheduler process: only 1 is supported
    extra_args: list[str] = field(default_factory=list)  # more sglang.launch_server args, verbatim
    token_scale: Optional[float] = None  # x every prefix/input/output length; None: automatic (scaling.py)
    time_scale: float = 1.0  # x arrival times and client gaps
    hint_channel: str = "kv_hints"  # kv_hints | custom_params | both
    stream: bool = False  # stream answers (client-side first-token times; more server work)
    warmup_requests: int = 2  # before the replay, invisible to the policy; then the cache is flushed
    decision_trigger: str = "change"  # plugin: change | pass
    cost_model: Optional[dict[str, Any]] = None  # LinearCostModel fields; None: cpu defaults / fitted on gpu
    latency: str = "auto"  # latency predictor the gpu cost model is fitted from
    startup_timeout_s: float = 900.0
    request_timeout_s: float = 3600.0
    replay_timeout_s: Optional[float] = None  # whole replay; None: no limit
    python: Optional[str] = None  # interpreter with sglang (None: this one)
    reuse_server: bool = False  # keep the server up for the next run of this process (same server options)


# ----------------------------------------------------------------------------------------------
# Resolution of options (pure; unit-tested without sglang)
# ----------------------------------------------------------------------------------------------


def gpu_visible() -> bool:
    """True when `nvidia-smi -L` lists at least one GPU."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return False
    try:
        p = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0 and "GPU" in p.stdout


def resolve_profile(b: SGLangBackendConfig) -> str:
    return ("gpu" if gpu_visible() else "cpu") if b.profile == "auto" else b.profile


def check_config(b: SGLangBackendConfig) -> None:
    """One-line ConfigError for an invalid combination of options."""
    def bad(msg: str) -> None:
        raise ConfigError(f"backend (sglang): {msg}")

    if b.profile not in PROFILES:
        bad(f"profile must be one of {', '.join(PROFILES)}, got '{b.profile}'")
    if b.token_scale is not None and not (0 < b.token_scale <= 1):
        bad(f"token_scale must be in (0, 1] or null (automatic), got {b.token_scale}")
    if not b.time_scale > 0:
        bad(f"time_scale must be positive, got {b.time_scale}")
    if b.hint_channel not in HINT_CHANNELS:
        bad(f"hint_channel must be one of {', '.join(HINT_CHANNELS)}, got '{b.hint_channel}'")
    if b.decision_trigger not in ("change", "pass"):
        bad(f"decision_trigger must be change or pass, got '{b.decision_trigger}'")
    if b.tp_size != 1:
        bad(f"tp_size={b.tp_size}: the topas plugin runs one policy per scheduler process; only tp_size=1 is supported")
    for k in ("max_total_tokens", "chunked_prefill_size", "max_running_requests"):
        v = getattr(b, k)
        if v is not None and v <= 0:
            bad(f"{k} must be positive, got {v}")
    if b.mem_fraction_static is not None and not (0 < b.mem_fraction_static < 1):
        bad(f"mem_fraction_static must be in (0, 1), got {b.mem_fraction_static}")
    if b.hicache_ratio is not None and not b.hicache_ratio > 0:
        bad(f"hicache_ratio must be positive, got {b.hicache_ratio}")
    if b.warmup_requests < 0:
        bad(f"warmup_requests must be >= 0, got {b.warmup_requests}")
    for k in ("startup_timeout_s", "request_timeout_s"):
        if not getattr(b, k) > 0:
            bad(f"{k} must be positive")
    if b.replay_timeout_s is not None and not b.replay_timeout_s > 0:
        bad("replay_timeout_s must be positive or null")
    if b.load_format is not None and b.load_format != "dummy" and b.model_path is None:
        bad(f"load_format={b.load_format} needs model_path (a checkpoint folder)")
    if b.cost_model is not None:
        from topas.engines.sglang.costs import load_cost_model

        try:
            load_cost_model(dict(b.cost_model))
        except (TypeError, ValueError) as e:
            bad(f"cost_model: {str(e).splitlines()[0]}")
    managed = {
        "--model-path", "--model", "--host", "--port", "--load-format", "--max-total-tokens",
        "--max-running-requests", "--chunked-prefill-size", "--schedule-policy", "--dtype",
        "--mem-fraction-static", "--enable-hierarchical-cache", "--hicache-ratio", "--skip-tokenizer-init",
    }
    clash = sorted({a.split("=")[0] for a in map(str, b.extra_args)} & managed)
    if clash:
        bad(f"extra_args {', '.join(clash)}: set the backend option instead")


def model_dir(b: SGLangBackendConfig, model) -> Path:
    """The folder given to --model-path."""
    if b.model_path is not None:
        p = Path(b.model_path).expanduser()
        if not p.exists():
            raise ConfigError(f"backend (sglang): model_path {p} does not exist")
        return p
    from topas.engines.latency.factory import resolve_hf_config

    try:
        cfg = resolve_hf_config(model)
    except ValueError as e:
        raise ConfigError(f"backend (sglang): {e}; set backend.model_path") from None
    if not cfg.is_file():
        raise ConfigError(f"backend (sglang): model {model.name}: no HF config at {cfg}")
    return cfg.parent


def server_args(b: SGLangBackendConfig, profile: str) -> tuple[dict[str, Any], list[str]]:
    """ServerConfig keyword arguments and extra launch args from the backend options."""
    pool = b.max_total_tokens if b.max_total_tokens is not None else (CPU_DEFAULT_POOL if profile == "cpu" else None)
    extra: list[str] = []
    if b.mem_fraction_static is not None:
        extra += ["--mem-fraction-static", str(b.mem_fraction_static)]
    if b.enable_hierarchical_cache:
        extra.append("--enable-hierarchical-cache")
        if b.hicache_ratio is not None:
            extra += ["--hicache-ratio", str(b.hicache_ratio)]
    if profile == "gpu" and not any(str(a) in ("--tp", "--tp-size", "--tensor-parallel-size") for a in b.extra_args):
        extra += ["--tp-size", str(b.tp_size)]
    extra += [str(a) for a in b.extra_args]
    kw = dict(
        load_format=b.load_format or ("dummy" if b.model_path is None else "auto"),
        profile=profile,
        schedule_policy=b.schedule_policy,
        max_total_tokens=pool,
        max_running_requests=b.max_running_requests,
        chunked_prefill_size=b.chunked_prefill_size,
        dtype=b.dtype,
        startup_timeout_s=b.startup_timeout_s,
        decision_trigger=b.decision_trigger,
    )
    return kw, extra


def fitted_cost_model(model, gpu, kind: str = "auto") -> dict[str, float]:
    """`LinearCostModel` fields fitted to the project's latency predictor for model/GPU:
    prefill = base + tokens / rate (512 and 4096 new tokens); decode step = base +
    per_seq x batch + per_ctx_token x batch x context (batch 1/32, context 1k/4k)."""
    from topas.engines.latency.factory import build_latency_model

    lat = build_latency_model(kind, model, gpu)
    p1, p2 = lat.prefill([(512, 0)]), lat.prefill([(4096, 0)])
    rate = (4096 - 512) / max(p2 - p1, 1e-9)
    d11, d321, d324 = lat.decode(1, 1024), lat.decode(32, 1024), lat.decode(32, 4096)
    per_ctx = max((d324 - d321) / (32 * 3072), 0.0)
    per_seq = max((d321 - d11) / 31 - per_ctx * 1024, 0.0)
    return {
        "bytes_per_token": int(model.kv_bytes_per_token),
        "prefill_tokens_per_s": float(rate),
        "prefill_base_s": float(max(p1 - 512 / rate, 0.0)),
        "decode_base_s": float(max(d11 - per_seq - per_ctx * 1024, 0.0)),
        "decode_per_seq_s": float(per_seq),
        "decode_per_ctx_token_s": float(per_ctx),
        "swap_bandwidth_bytes_per_s": float(gpu.host_link_gbs) * 1e9,
        "swap_latency_s": float(gpu.host_link_latency_s),
    }


def resolve_cost_model(b: SGLangBackendConfig, profile: str, model, gpu) -> dict[str, Any] | None:
    if b.cost_model is not None:
        return dict(b.cost_model)
    if profile == "cpu":
        return None  # costs.py defaults (measured with the tiny model on CPU)
    try:
        return fitted_cost_model(model, gpu, b.latency)
    except Exception as e:  # noqa: BLE001 - the policy still runs, with the defaults
        print(f"warning: sglang backend: cost model not fitted ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
              "policies see the CPU defaults of costs.py", file=sys.stderr)
        return None


def resolve_token_scale(b: SGLangBackendConfig, trace, model, pool: int | None) -> float:
    from topas.engines.sglang.scaling import auto_token_scale, max_call_tokens, scale_trace

    scale = b.token_scale if b.token_scale is not None else auto_token_scale(trace, model.context_len, pool)
    biggest = max_call_tokens(scale_trace(trace, scale))
    if biggest > model.context_len or (pool is not None and biggest > pool):
        limit = model.context_len if pool is None else min(model.context_len, pool)
        raise ConfigError(
            f"backend (sglang): the largest call has {biggest} tokens (token_scale {scale:g}), more than the "
            f"{limit} the server can hold (model {model.name}); lower backend.token_scale or use a larger model"
        )
    return scale


def sglang_version(python: str) -> str | None:
    code = "import importlib.metadata as m; print(m.version('sglang'))"
    try:
        p = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    return p.stdout.strip() or None


# ----------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------


def _log_hint(srv, shown: Path | None = None) -> str:
    """The server log's most telling last line, and where the log is kept (`shown`: the run
    folder's copy when the server is a kept one)."""
    from topas.engines.sglang.server import _last_line

    last = _last_line(srv.log_path) if srv.log_path else ""
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
    from topas.engines.sglang.driver import run_trace

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


LOG_FILES = (("server", "log"), ("decisions", "jsonl"), ("iterations", "jsonl"))


def _log_paths(folder: Path) -> dict[str, Path]:
    return {k: folder / f"{k}.{ext}" for k, ext in LOG_FILES}


def _reset_logs(out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = _log_paths(out)
    files["calls"] = out / "calls.jsonl"
    for p in files.values():  # a rerun in the same folder starts clean (the plugin appends)
        p.unlink(missing_ok=True)
    return files


@dataclass
class _SharedServer:
    """A server kept up between runs of one process (`reuse_server`)."""

    server: Any  # SGLangServer
    logs: dict[str, Path]  # its server / decision / iteration logs (in a folder of their own)
    runs: int = 0


_SHARED: dict[str, _SharedServer] = {}


def shutdown_shared_servers() -> None:
    """Stop every server kept by `reuse_server` (also done at interpreter exit)."""
    while _SHARED:
        _, sh = _SHARED.popitem()
        sh.server.stop()
        shutil.rmtree(next(iter(sh.logs.values())).parent, ignore_errors=True)  # each run kept its slice


def _keep(key: str, srv, logs: dict[str, Path]) -> None:
    if not _SHARED:
        import atexit

        atexit.unregister(shutdown_shared_servers)
        atexit.register(shutdown_shared_servers)
    _SHARED.setdefault(key, _SharedServer(srv, logs)).runs += 1


def _server_key(scfg) -> str:
    """What must match for a kept server to serve another run (everything but the policy)."""
    return json.dumps(
        {
            "cmd": scfg.command(0), "python": scfg.python, "costs": scfg.cost_model, "trigger": scfg.decision_trigger,
            "env": dict(scfg.env), "modules": list(scfg.policy_modules),
        },
        sort_keys=True, default=str,
    )


def _size(p: Path) -> int:
    try:
        return p.stat().st_size
    except OSError:
        return 0


def _copy_tail(src: Path, offset: int, dst: Path) -> None:
    with open(src, "rb") as f, open(dst, "wb") as g:
        f.seek(offset)
        shutil.copyfileobj(f, g)


def _start_event(decisions: Path) -> dict[str, Any] | None:
    from topas.engines.sglang.records import read_jsonl

    return next((r for r in read_jsonl(decisions) if r.get("event") == "start"), None)


def run_sglang(ctx) -> tuple[RunRecord, float]:
    """Run `ctx.trace` on a real SGLang server with `ctx.scheduler` as the policy."""
    import tempfile

    from topas.engines.sglang.driver import DriverConfig, DriverError
    from topas.engines.sglang.records import read_jsonl, sglang_record
    from topas.engines.sglang.scaling import scale_trace
    from topas.engines.sglang.server import (
        SGLangNotInstalled,
        SGLangServer,
        SGLangServerError,
        ServerConfig,
        check_sglang_importable,
    )

    b: SGLangBackendConfig = ctx.backend
    check_config(b)
    python = b.python or sys.executable
    try:
        check_sglang_importable(python)
    except SGLangNotInstalled as e:
        raise ConfigError(str(e)) from None
    profile = resolve_profile(b)
    if profile == "cpu":
        if b.enable_hierarchical_cache:
            raise ConfigError("backend (sglang): enable_hierarchical_cache needs CUDA (profile cpu)")
        if ctx.model.params_b > 1.0:
            raise ConfigError(
                f"backend (sglang): model {ctx.model.name} ({ctx.model.params_b:g}B parameters) on the CPU profile; "
                "use model=tiny_cpu, or a GPU (backend.profile=gpu)"
            )
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
    files = _reset_logs(Path(ctx.out_dir))
    run_log = files["server"]  # where errors point: the run folder's server log (a kept server's is copied there)
    policy, params = ctx.scheduler.name, dict(ctx.scheduler.params or {})

    def server_config(logs: dict[str, Path]) -> ServerConfig:
        return ServerConfig(
            model_path=mdir, extra_args=extra, policy=policy, policy_params=params,
            decision_log=logs["decisions"], iteration_log=logs["iterations"], log_path=logs["server"],
            cost_model=costs, python=python, **kw,
        )

    # the server: a fresh one logging into the run folder, or (reuse_server) one kept in this
    # process, whose logs live in a folder of their own and are sliced into the run folder
    key = _server_key(server_config(files)) if b.reuse_server else None
    shared = _SHARED.get(key) if key is not None else None
    if shared is not None and not shared.server.alive():
        _SHARED.pop(key, None)
        shared = None
    logs = shared.logs if shared is not None else (
        _log_paths(Path(tempfile.mkdtemp(prefix="topas-sglang-server-"))) if key is not None else files
    )
    offsets = {k: _size(p) for k, p in logs.items()}
    srv = shared.server if shared is not None else SGLangServer(server_config(logs))
    fresh = shared is None
    keep = False
    meta: dict[str, Any] = {}
    dcfg = DriverConfig(
        base_url="http://unset",
        vocab_size=_vocab_size(mdir, ctx.model),
        hint_channel=b.hint_channel,
        request_timeout_s=b.request_timeout_s,
        stream=b.stream,
        on_task_done=(lambda _tid: ctx.progress(1)) if ctx.progress is not None else None,
        reuse_bounds=False,
    )
    try:
        try:
            if fresh:
                srv.start()
            else:
                srv.set_policy(policy, params)  # a fresh policy instance; the plugin forgets the last replay
        except SGLangServerError as e:
            raise SGLangRunError(str(e).replace(str(srv.log_path), str(run_log))) from None
        except OSError as e:  # the kept server did not answer the policy switch
            raise SGLangRunError(f"policy switch on the kept server failed: {e}: {_log_hint(srv, run_log)}") from None
        dcfg.base_url = srv.base_url
        try:
            warm_up(srv, b.warmup_requests if fresh else 0, timeout=b.request_timeout_s)
            if not fresh:
                flush_when_idle(srv)
        except OSError as e:  # urllib errors
            raise SGLangRunError(f"warm-up request failed: {e}: {_log_hint(srv, run_log)}") from None
        try:
            calls = asyncio.run(_replay_watched(srv, trace, dcfg, meta, b.replay_timeout_s, run_log))
        except DriverError as e:
            if not srv.alive():
                raise SGLangRunError(f"sglang server died during the replay ({e}): {_log_hint(srv, run_log)}") from None
            raise SGLangRunError(f"{e} {_log_hint(srv, run_log)}") from None
        keep = key is not None
    except KeyboardInterrupt:
        srv.stop()
        raise SGLangRunError(f"interrupted; the sglang server was stopped (log: {run_log})") from None
    finally:
        if keep:
            _keep(key, srv, logs)
        else:
            if key is not None:
                _SHARED.pop(key, None)
            srv.stop()
        if logs is not files:  # this run's slice of the kept server's logs
            time.sleep(0.05)  # the scheduler logs a finished iteration just before the answer leaves
            for k, p in logs.items():
                if p.exists():
                    _copy_tail(p, offsets[k], files[k])
            if not keep:
                shutil.rmtree(logs["server"].parent, ignore_errors=True)
    with open(files["calls"], "w", encoding="utf-8") as f:
        for c in calls:
            f.write(json.dumps(c) + "\n")
    for c in calls:  # exact output lengths (ignore_eos): anything else is a server problem
        if int(c["output_tokens"]) != int(c["expected_output_tokens"]):
            raise SGLangRunError(
                f"request {c['rid']}: {c['output_tokens']} output tokens, expected {c['expected_output_tokens']} "
                f"(finish reason {c.get('finish_reason')}); log: {files['server']}"
            )
    decisions = read_jsonl(files["decisions"])
    if not any(d.get("event") == "start" for d in decisions):
        start = _start_event(logs["decisions"])  # a kept server logged it during its first run
        decisions = ([start] if start else []) + decisions
    engine = {
        "sglang_version": version,
        "profile": profile,
        "token_scale": scale,
        "time_scale": b.time_scale,
        "server_startup_s": round(srv.startup_s, 3) if fresh and srv.startup_s is not None else 0.0,
        "server_reused": not fresh,
        "hint_channel": b.hint_channel,
    }
    if not b.enable_hierarchical_cache:
        engine["swap_out_bytes"] = 0  # no host tier; with HiCache the write-back volume is not observable
    record = sglang_record(
        trace, calls, meta["t0_wall"], ctx.warmup_fraction,
        decisions=decisions, iterations=read_jsonl(files["iterations"]), engine=engine,
    )
    return record, float(meta.get("wall_s", math.nan))


def _vocab_size(mdir: Path, model) -> int:
    try:
        return int(json.loads((mdir / "config.json").read_text())["vocab_size"])
    except (OSError, ValueError, KeyError):
        return int(model.vocab_size)
