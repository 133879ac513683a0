"""The server one `backend=sglang` run uses, and the servers kept between runs
(`backend.reuse_server=true`).

A run gets a `ServerLease`: either a fresh server logging straight into the run folder
(`server.log`, `decisions.jsonl`, `iterations.jsonl`), or a server kept in this process
from an earlier run with the same server options (everything but the policy, which is
switched in place). A kept server's logs live in a folder of their own; each run gets its
slice of them copied into its run folder when the lease is released.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOG_FILES = (("server", "log"), ("decisions", "jsonl"), ("iterations", "jsonl"))


def log_paths(folder: Path) -> dict[str, Path]:
    return {k: folder / f"{k}.{ext}" for k, ext in LOG_FILES}


def reset_logs(out: Path) -> dict[str, Path]:
    """The run folder's log files (plus the driver's `calls.jsonl`), removed if a rerun finds them."""
    out.mkdir(parents=True, exist_ok=True)
    files = log_paths(out)
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


def server_key(scfg) -> str:
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


class ServerLease:
    """The server of one run. `key` None: a fresh server (`make_server(files)`), stopped at
    `release`. With a key (`server_key`): the server kept under that key if it is alive,
    else a fresh one logging into a folder of its own, kept at `release(keep=True)`."""

    def __init__(self, make_server: Callable[[dict[str, Path]], Any], files: dict[str, Path], key: str | None) -> None:
        self.files = files
        self.key = key
        shared = _SHARED.get(key) if key is not None else None
        if shared is not None and not shared.server.alive():
            _SHARED.pop(key, None)
            shared = None
        if shared is not None:
            self.logs = shared.logs
        elif key is not None:
            self.logs = log_paths(Path(tempfile.mkdtemp(prefix="topas-sglang-server-")))
        else:
            self.logs = files
        self.offsets = {k: _size(p) for k, p in self.logs.items()}
        self.server = shared.server if shared is not None else make_server(self.logs)
        self.fresh = shared is None

    def release(self, keep: bool) -> None:
        """Keep the server for the next run (`keep` and a key) or stop it; copy this run's
        slice of a kept server's logs into the run folder."""
        keep = keep and self.key is not None
        if keep:
            _keep(self.key, self.server, self.logs)
        else:
            if self.key is not None:
                _SHARED.pop(self.key, None)
            self.server.stop()
        if self.logs is not self.files:
            time.sleep(0.05)  # the scheduler logs a finished iteration just before the answer leaves
            for k, p in self.logs.items():
                if p.exists():
                    _copy_tail(p, self.offsets[k], self.files[k])
            if not keep:
                shutil.rmtree(self.logs["server"].parent, ignore_errors=True)

    def start_event(self) -> dict[str, Any] | None:
        """The plugin's `start` record (a kept server logged it during its first run)."""
        from topas.engines.sglang.jsonl import read_jsonl

        return next((r for r in read_jsonl(self.logs["decisions"]) if r.get("event") == "start"), None)
