"""The port a server is started on: free now, and still free seconds later when the server binds it."""

from __future__ import annotations

import random
import socket


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1", low: int = 15000, high: int = 21999, attempts: int = 64) -> int:
    """A free port for a server that binds it only seconds later (after loading the model).

    Taken below the kernel's ephemeral range: an ephemeral port (bind to 0) can meanwhile be
    handed to any outgoing connection, our own health checks included (a connect to a local
    port with no listener can get that same port as its source and connect to itself); a CI
    run once lost a server to "address already in use". Below 22000 too, where
    SGLang picks its own NCCL port with the same reasoning (srt/utils/network.py).
    """
    high = min(high, _ephemeral_low() - 1)
    candidates = random.Random().sample(range(low, high + 1), min(attempts, max(0, high - low + 1)))
    for port in candidates:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # the range is full: any free port
        s.bind((host, 0))
        return int(s.getsockname()[1])
