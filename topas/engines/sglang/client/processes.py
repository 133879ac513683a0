"""Process helpers for the server's lifecycle, on psutil: the process tree below a pid,
stopping a process group together with any descendant that left it, and the parent-death
signal that takes the server down with a runner killed outright."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence

import psutil


def stop_process_group(proc: subprocess.Popen, grace_s: float) -> None:
    """Stop `proc` (leader of its own session / process group) and every descendant: SIGTERM
    to the group, SIGKILL after `grace_s`, SIGKILL to descendants that left the group
    (setsid), then wait until all are gone (at most ~15 s more)."""
    pgid = proc.pid  # start_new_session: the group id is the leader's pid
    family = _family(proc.pid)  # taken before any signal: strays are found while their parent lives
    if proc.poll() is None:
        _signal_group(pgid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(pgid, signal.SIGKILL)
    for p in family:  # children that left the group (setsid)
        try:
            p.kill()  # psutil checks the pid still names the process it saw (no reused pid is hit)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    _wait_gone(family, timeout=10)


def die_with_parent() -> None:
    """In the server's launcher process (before exec): SIGTERM when the process that started it
    dies, even by SIGKILL (Linux PR_SET_PDEATHSIG; SGLang's launcher then stops its own
    children). Without it a killed runner would leave a server holding the GPU. psutil has no
    call for it. No-op elsewhere."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except Exception:  # noqa: BLE001 - not Linux: stop() and atexit still apply
        pass


def descendants(pid: int) -> list[int]:
    """Pids of every process below `pid` (children, grandchildren, ...); empty if it is gone."""
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def processes_alive(pids: Sequence[int]) -> list[int]:
    """The subset of `pids` still running (not zombies)."""
    out = []
    for pid in pids:
        try:
            if _running(psutil.Process(pid)):
                out.append(pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return out


def _family(pid: int) -> list[psutil.Process]:
    try:
        leader = psutil.Process(pid)
        return [leader] + leader.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def _running(p: psutil.Process) -> bool:
    """Still the same process (`is_running` compares its start time: a reused pid is not it)
    and not a zombie (exited, waiting to be reaped by whoever is its parent now)."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_gone(procs: Iterable[psutil.Process], timeout: float) -> None:
    procs = list(procs)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_running(p) for p in procs):
        time.sleep(0.1)
