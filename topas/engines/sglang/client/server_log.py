"""Reading a server's log: its tail, the one line that says why it failed, the bind error of a taken port."""

from __future__ import annotations

import os
from pathlib import Path


def tail(path: Path, size: int = 8192, since: int = 0) -> str:
    """The last `size` bytes of a log, never reaching before byte `since`."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(since, f.tell() - size))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def last_line(path: Path) -> str:
    lines = [ln.strip() for ln in tail(path).splitlines() if ln.strip()]
    lines = [ln for ln in lines if not any(n in ln for n in LOG_NOISE)]
    for ln in reversed(lines):  # a crashed child, as the launcher reports it
        if "crashed with exit code" in ln:
            return ln[:300]
    for ln in reversed(lines):  # else the exception line of a traceback, or an argparse error
        if "Error" in ln or "Exception" in ln or "error:" in ln:
            return ln[:300]
    return lines[-1][:300] if lines else ""


BIND_ERROR = "error while attempting to bind on address"  # asyncio's create_server, as uvicorn logs it
# harmless start-up warnings that mention errors (sglang 0.5.23 on the CPU install)
LOG_NOISE = ("OpenAI Responses API (/v1/responses) disabled", "UserWarning", "warnings.warn(")
