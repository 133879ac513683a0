"""The engine's timeline, observed inside the scheduler after each batch result
(plugin hook 4, `TOPAS_ITERATION_LOG`): one JSONL record per prefill iteration or decode
stretch. The run records' timeline and first-token times, and the latency profiler
(`tools/profiler.py`), read it."""

from __future__ import annotations

import time
from typing import Any

from topas.engines.sglang.jsonl import JsonlWriter
from topas.engines.sglang.plugin.adapter import engine_capacity
from topas.engines.sglang.plugin.cache_probe import CacheProbe


class IterationLog:
    """One JSONL record per prefill iteration or decode stretch, written by the scheduler.

    Timing follows SGLang 0.5.23's own step accounting (`Scheduler._record_step_counters`):
    an iteration ends when its `process_batch_result` returns; it starts where the previous
    one ended when the two are back to back (launched less than `max_gap_s` after it, or
    before it ended as with the overlap scheduler, and not after an idle pass), else at its
    own launch (`batch.launch_ts`). So busy time is tiled without gaps (the scheduler's own
    work between iterations counts, as SGLang's decode cadence does) and idle time is
    never counted. With overlap (GPU default) the duration is the result-to-result cadence.

    Record fields (times: wall clock `time.time()` seconds):
      kind "prefill" | "decode", start, duration, steps (decode iterations merged into the
      stretch: consecutive, same batch size, < `max_stretch_s`), batch_size, tokens (as
      the simulator: prefill: cached + computed context of the batch's requests after the
      iteration; decode: mean context per request at the stretch start), extend_tokens
      (prefill: new tokens computed), kv_used_tokens, tree_tokens, evictable_tokens,
      host_tokens, waiting, running (after the iteration), first (rids whose first
      output token this prefill produced), finished (rids that finished in it).
    """

    def __init__(self, path: str | None, max_stretch_s: float = 0.5, max_gap_s: float = 0.02) -> None:
        self._out = JsonlWriter(path)
        self.max_stretch_s = max_stretch_s
        self.max_gap_s = max_gap_s
        self.prev_end: float | None = None  # monotonic
        self.pending: dict[str, Any] | None = None  # open decode stretch
        self.first_seen: set[str] = set()
        self.probe: CacheProbe | None = None
        self.errors = 0

    def _write(self, rec: dict[str, Any]) -> None:
        self._out.write_record(rec)

    def flush(self) -> None:
        if self.pending is not None:
            self._write(self.pending)
            self.pending = None

    def _state(self, scheduler: Any) -> dict[str, Any]:
        if self.probe is None or self.probe.cache is not scheduler.tree_cache:
            self.probe = CacheProbe(scheduler.tree_cache)
        cap = engine_capacity(scheduler, self.probe)
        cache = scheduler.tree_cache
        try:
            tree = int(cache.evictable_size()) + int(cache.protected_size())
        except Exception:  # noqa: BLE001 - a cache without the counters
            tree = None
        running = getattr(getattr(scheduler, "running_batch", None), "reqs", None) or []
        return {
            "kv_used_tokens": cap.kv_used_tokens,
            "tree_tokens": tree,
            "evictable_tokens": cap.kv_evictable_tokens,
            "host_tokens": cap.host_used_tokens if cap.host_capacity_tokens else None,
            "waiting": len(scheduler.waiting_queue),
            "running": len(running),
        }

    def observe(self, scheduler: Any, batch: Any) -> None:
        end_m = time.monotonic()
        offset = time.time() - end_m  # monotonic -> wall clock
        mode = batch.forward_mode
        if mode.is_extend():
            kind = "prefill"
        elif mode.is_decode():
            kind = "decode"
        else:  # idle / prebuilt batches: no model work of ours
            return
        launch = batch.launch_ts if batch.launch_ts is not None else end_m
        # back-to-back with the previous iteration (overlap: launched before it ended; no
        # overlap: only the scheduler's own gap in between): it starts where that one ended
        contiguous = (
            self.prev_end is not None
            and not getattr(batch, "after_idle_gap", False)
            and launch - self.prev_end <= self.max_gap_s
        )
        start_m = self.prev_end if contiguous else launch
        self.prev_end = end_m
        reqs = list(batch.reqs)
        bs = len(reqs)
        finished = [str(r.rid) for r in reqs if r.finished()]
        state = self._state(scheduler)
        if kind == "prefill":
            self._prefill(batch, reqs, start_m + offset, end_m - start_m, finished, state)
            return
        self._decode(batch, bs, contiguous, (start_m + offset, end_m + offset, end_m - start_m), finished, state)

    def _prefill(self, batch: Any, reqs: list, start: float, duration: float, finished: list[str], state: dict) -> None:
        """One line per prefill iteration, naming the requests whose first token it made."""
        self.flush()
        first = []
        for r in reqs:
            rid = str(r.rid)
            if rid not in self.first_seen and len(r.output_ids) >= 1:
                self.first_seen.add(rid)
                first.append(rid)
        extend = int(sum(batch.extend_lens)) if batch.extend_lens is not None else None
        prefix = int(sum(batch.prefix_lens)) if batch.prefix_lens is not None else None
        tokens = extend + prefix if extend is not None and prefix is not None else None
        self._write({"kind": "prefill", "start": start, "duration": duration, "steps": 1,
                     "batch_size": len(reqs), "tokens": tokens, "extend_tokens": extend, **state, "first": first,
                     "finished": finished})

    def _decode(self, batch: Any, bs: int, contiguous: bool, times: tuple[float, float, float], finished: list[str],
                state: dict) -> None:
        """Decode steps of one batch size, back to back, are one stretch (one line when it ends); `times`: the
        step's start and end (wall clock) and its duration."""
        start, end, duration = times
        p = self.pending
        if p is not None and contiguous and p["batch_size"] == bs and end - p["start"] < self.max_stretch_s:
            p["duration"] = end - p["start"]
            p["steps"] += 1
            p.update(state)
            p["finished"] += finished
        else:
            self.flush()
            seq = batch.seq_lens_cpu
            try:
                ctx = float(seq.sum().item()) / bs if seq is not None and bs else None
            except Exception:  # noqa: BLE001
                ctx = None
            self.pending = {"kind": "decode", "start": start, "duration": duration, "steps": 1,
                            "batch_size": bs, "tokens": ctx, **state, "first": [], "finished": finished}
        if finished:  # the batch shrinks (or the engine goes idle): close the stretch now
            self.flush()

    def close(self) -> None:
        self.flush()
        self._out.close()
