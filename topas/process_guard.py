"""Processes of a sweep end with the process that started them.

`make reproduce` starts `run.py -m`, whose launcher starts worker processes. A SIGKILL of
the driver cannot be caught, so each process watches its own parent instead: when the
parent is gone (the process was re-parented), it exits. Enabled by TOPAS_WATCH_PARENT=1
(set by the sweep drivers and inherited by every process below them), so a run started by
hand and detached (nohup) is left alone. The sweep driver starts the multirun as a process
group leader, which kills its whole group (workers, pool helpers) when the driver is gone.
"""

from __future__ import annotations

import os
import signal
import threading

ENV = "TOPAS_WATCH_PARENT"
_started: set[int] = set()


def exit_with_parent(poll_s: float = 1.0) -> None:
    """Start (once per process) a daemon thread that ends this process when its parent dies."""
    if os.environ.get(ENV) != "1" or os.getpid() in _started:
        return
    _started.add(os.getpid())
    parent = os.getppid()

    def watch() -> None:
        ev = threading.Event()
        while not ev.wait(poll_s):
            if os.getppid() != parent:
                if os.getpgrp() == os.getpid():  # a sweep's group leader takes its workers and helpers along
                    os.killpg(os.getpid(), signal.SIGKILL)
                os._exit(143)  # like SIGTERM: the sweep was killed, this run's outputs are incomplete

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
