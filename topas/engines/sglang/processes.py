"""Process helpers for the server's lifecycle (Linux /proc; no psutil needed): the process
tree below a pid, and stopping a process group together with any descendant that left it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence


def stop_process_group(proc: subprocess.Popen, grace_s: float) -> None:
    """Stop `proc` (leader of its own session / process group) and every descendant: SIGTERM
    to the group, SIGKILL after `grace_s`, SIGKILL to descendants that left the group
    (setsid), then wait until all are gone (at most ~15 s more)."""
    pgid = proc.pid  # start_new_session: the group id is the leader's pid
    family = {pid: _start_time(pid) for pid in [proc.pid] + descendants(proc.pid)}
    if proc.poll() is None:
        _signal_group(pgid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(pgid, signal.SIGKILL)
    for pid, started in family.items():  # children that left the group (setsid)
        if started is not None and _start_time(pid) == started:  # same process, not a reused pid
            _kill(pid)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    _wait_gone(list(family), timeout=10)


def die_with_parent() -> None:
    """In the server's launcher process (before exec): SIGTERM when the process that started it
    dies, even by SIGKILL (Linux PR_SET_PDEATHSIG; SGLang's launcher then stops its own
    children). Without it a killed runner would leave a server holding the GPU. No-op elsewhere."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except Exception:  # noqa: BLE001 - not Linux: stop() and atexit still apply
        pass


def _children_map() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        # pid (comm) state ppid ...; comm may contain spaces and parentheses
        rest = stat[stat.rfind(")") + 2 :].split()
        if len(rest) >= 2:
            out.setdefault(int(rest[1]), []).append(int(entry))
    return out


def descendants(pid: int) -> list[int]:
    if not os.path.isdir("/proc"):
        return []
    children = _children_map()
    out, stack = [], [pid]
    while stack:
        for c in children.get(stack.pop(), []):
            out.append(c)
            stack.append(c)
    return out


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("utf-8", "replace")
        return int(stat[stat.rfind(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().decode("utf-8", "replace")
        return state[state.rfind(")") + 2 :].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids: Sequence[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_pid_alive(p) for p in pids):
        time.sleep(0.1)


def processes_alive(pids: Sequence[int]) -> list[int]:
    """The subset of `pids` still running (not zombies)."""
    return [p for p in pids if _pid_alive(p)]
