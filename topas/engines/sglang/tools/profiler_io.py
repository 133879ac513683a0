"""Access to a running SGLang server for measurements (`profiler.py`): a minimal HTTP client
(one pooled `httpx.Client`, shared by the profiler's threads) that sends token ids with exact
output lengths, the plugin's iteration log read as it grows,
and the server settings the simulator must copy."""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from topas.engines.sglang.client.driver import segment_token_ids
from topas.engines.sglang.client.http_client import request, sync_client


class ProfileRunError(RuntimeError):
    pass


class IterationTail:
    """Reads the records appended to an iteration log since the last call."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def new(self, settle_s: float = 0.03) -> list[dict[str, Any]]:
        time.sleep(settle_s)  # the scheduler writes the record just before the answer leaves
        if not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        return [json.loads(x) for x in data[:end].splitlines() if x.strip()]


class Client:
    def __init__(self, base_url: str, vocab_size: int, timeout_s: float = 600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.vocab = vocab_size
        self.timeout_s = timeout_s
        self.tag = uuid.uuid4().hex[:8]
        self.n = 0
        self.http = sync_client(timeout_s)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def fresh(self, n: int) -> list[int]:
        self.n += 1
        return segment_token_ids(f"profile:{self.tag}:{self.n}", n, self.vocab).tolist()

    def generate(self, ids: Sequence[int], max_new: int) -> tuple[str, float, float]:
        """(rid, send time, answer time), wall clock."""
        self.n += 1
        rid = f"topas-profile-{self.tag}-{self.n}"
        body = {"rid": rid, "input_ids": list(ids),
                "sampling_params": {"max_new_tokens": int(max_new), "ignore_eos": True, "temperature": 0.0}}
        t0 = time.time()
        self._request("POST", "/generate", json.dumps(body).encode(), self.timeout_s)
        return rid, t0, time.time()

    def get(self, path: str) -> Any:
        return self._request("GET", path, None, 60.0).json()

    def _request(self, method: str, path: str, body: bytes | None, timeout: float) -> httpx.Response:
        """The answer, read in full; `ServerRequestError` (one line) on an error status or none."""
        return request(self.http, self.base_url, method, path, body, timeout)


def server_facts(client: Client, context_len: int | None) -> dict[str, Any]:
    """Settings of the running server the simulator must copy (from /get_server_info)."""
    info = client.get("/get_server_info")
    state = (info.get("internal_states") or [{}])[0]
    mem = state.get("memory_usage") or {}
    pool = mem.get("token_capacity") or info.get("max_total_tokens")
    model_path = info.get("model_path")
    if context_len is None:
        context_len = info.get("context_length")
    if context_len is None and model_path:
        try:
            context_len = json.loads((Path(model_path) / "config.json").read_text())["max_position_embeddings"]
        except (OSError, ValueError, KeyError):
            context_len = None
    return {
        "sglang_version": info.get("version"),
        "model_path": model_path,
        "device": info.get("device"),
        "kv_pool_tokens": int(pool) if pool else None,
        "chunked_prefill_size": info.get("chunked_prefill_size"),
        "max_prefill_tokens": info.get("max_prefill_tokens"),
        "max_running_requests": state.get("effective_max_running_requests_per_dp") or info.get("max_running_requests"),
        "page_size": info.get("page_size"),
        "context_len": int(context_len) if context_len else None,
        "disable_overlap_schedule": info.get("disable_overlap_schedule"),
        "schedule_conservativeness": info.get("schedule_conservativeness"),
    }


def median_or_none(xs: Sequence[float]) -> float | None:
    return float(statistics.median(xs)) if xs else None
