"""Asyncio client that replays a `topas.workflow.Trace` against a running SGLang server.

- Each task starts at its arrival time (seconds after the replay starts, x `time_scale`);
  each call is released when all its dependencies have finished, plus its `gap_s`.
- Prompts are `input_ids` built from the call's segments (docs/workflow_model.md): the
  agent prefix, history segments, fresh input. Token ids are a deterministic function
  of (segment id, position) within the model's vocabulary, so equal segments are equal
  token runs in every call; an `out` segment is replaced by the token ids the server
  actually returned for that node, so reuse of generated text is real reuse.
  Never an empty prompt (the agent prefix is always there; empty prompts crash the
  sglang 0.5.23 scheduler).
- Exact output lengths: `max_new_tokens = output_tokens`, `ignore_eos = true`, greedy.
- Workflow metadata travels in the `kv_hints` envelope as action `topas.workflow/v1`
  (`../hints.py`; read by `../plugin/adapter.py`), optionally also in `sampling_params.custom_params`.

- HTTP: one pooled keep-alive `httpx.AsyncClient` per replay; at most `max_inflight`
  requests in flight (a semaphore; the pool holds as many connections). A failed request is
  a one-line `DriverError` (`HTTP 400: <body>`, or the transport error).

`run_trace(trace, DriverConfig(base_url=...))` returns one plain dict per call (see
`CallRecord`); times are seconds since the replay started (monotonic clock).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import httpx
import numpy as np

from topas.engines.sglang.client.http_client import async_client, error_line, status_line
from topas.engines.sglang.hints import (
    WorkflowHint,
    custom_params_fallback,
    kv_hints_envelope,
    template_to_json,
)
from topas.workflow import Task, Trace, Workflow, prefix_segment_id, task_segment_id

# Token ids below this are left alone (BOS/EOS/pad of small vocabularies).
TOKEN_ID_OFFSET = 3


class DriverError(RuntimeError):
    pass


def segment_token_ids(segment_id: str, n: int, vocab_size: int, offset: int = TOKEN_ID_OFFSET) -> np.ndarray:
    """Token ids of a segment: position i depends only on (segment_id, i)."""
    if vocab_size <= offset + 1:
        raise ValueError(f"vocab_size {vocab_size} too small")
    seed = int.from_bytes(hashlib.blake2b(segment_id.encode(), digest_size=8).digest(), "little")
    pos = np.arange(n, dtype=np.uint64)
    # splitmix64 of (seed + position): a fixed hash, independent of how many ids are drawn
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + pos * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z % np.uint64(vocab_size - offset)).astype(np.int64) + offset


@dataclass
class DriverConfig:
    base_url: str
    vocab_size: int = 1000
    time_scale: float = 1.0  # multiply arrival times and gaps
    hint_channel: str = "kv_hints"  # "kv_hints" | "custom_params" | "both"
    include_template_spec: bool = True  # send the task's template in the hint payload
    request_timeout_s: float = 3600.0  # each connect / read of a request (as a socket timeout)
    max_inflight: int = 512  # requests in flight at once (later calls wait for a slot)
    run_tag: str | None = None  # prefix of request ids; default: a random tag
    temperature: float = 0.0
    stream: bool = False  # stream the answer to record the first token's arrival (more server work per token)
    on_task_done: Callable[[int], None] | None = None  # called with the task id when its last call finished
    reuse_bounds: bool = True  # fill `reuse_bound_tokens` at the end (quadratic in the number of calls)


@dataclass
class CallRecord:
    rid: str
    task_id: int
    node: str
    stage: str
    agent: str
    task_arrival: float  # replay seconds
    ready: float  # deps finished + gap: released to the server
    finish: float  # response received
    first_token: float | None  # first streamed token received (DriverConfig.stream), else None
    prompt_tokens: int
    prefix_tokens: int
    predicted_reuse_tokens: int  # leading tokens shared with an earlier call's prompt + output (segment rule)
    cached_tokens: int  # server: meta_info.cached_tokens
    cached_tokens_device: int | None
    cached_tokens_host: int | None
    output_tokens: int  # server: completion_tokens
    expected_output_tokens: int
    e2e_latency_s: float | None  # server-side
    num_retractions: int
    finish_reason: str | None
    reuse_bound_tokens: int = 0  # like predicted_reuse_tokens, against every other call of the replay (any order)


class _Replay:
    def __init__(self, trace: Trace, cfg: DriverConfig) -> None:
        self.trace = trace
        self.cfg = cfg
        self.tag = cfg.run_tag or uuid.uuid4().hex[:8]
        self.seg_cache: dict[tuple[str, int], np.ndarray] = {}
        self.outputs: dict[tuple[int, str], list[int]] = {}
        self.records: list[CallRecord] = []
        self.t0_mono = 0.0
        self.t0_wall = 0.0
        self.url = f"{cfg.base_url.rstrip('/')}/generate"
        self.http: httpx.AsyncClient | None = None  # opened by run()
        self.slots: asyncio.Semaphore | None = None
        # what the server's radix tree could hold: token sequences already sent / produced
        self._seen_seqs: list[tuple[tuple[str, int], ...]] = []
        self._finished_seqs: dict[str, tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]] = {}
        self.templates_json = {name: template_to_json(t) for name, t in trace.templates.items()}

    def now(self) -> float:
        return time.monotonic() - self.t0_mono

    def wall(self, replay_t: float) -> float:
        return self.t0_wall + replay_t

    def _segment_ids(self, seg_id: str, n: int) -> np.ndarray:
        key = (seg_id, n)
        if key not in self.seg_cache:
            self.seg_cache[key] = segment_token_ids(seg_id, n, self.cfg.vocab_size)
        return self.seg_cache[key]

    def prompt_ids(self, task: Task, node_id: str) -> tuple[list[int], list[tuple[str, int]]]:
        wf = task.workflow
        node = wf.nodes[node_id]
        parts: list[np.ndarray] = []
        segs: list[tuple[str, int]] = []
        pid = prefix_segment_id(node.agent)
        n_prefix = wf.agents[node.agent].prefix_tokens
        parts.append(self._segment_ids(pid, n_prefix))
        segs.append((pid, n_prefix))
        for ref in node.history:
            sid = task_segment_id(task.task_id, ref)
            if ref.kind == "out":
                ids = self.outputs[(task.task_id, ref.node)]
                parts.append(np.asarray(ids, dtype=np.int64))
                segs.append((sid, len(ids)))
            else:
                n = wf.segment_tokens(ref)
                parts.append(self._segment_ids(sid, n))
                segs.append((sid, n))
        sid = task_segment_id(task.task_id, _in_ref(node_id))
        parts.append(self._segment_ids(sid, node.input_tokens))
        segs.append((sid, node.input_tokens))
        ids = np.concatenate(parts).tolist()
        if not ids:
            raise DriverError(f"task {task.task_id}, node {node_id}: empty prompt")
        return ids, segs

    async def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        """POST /generate; the final answer, plus `_first_token` (replay seconds) when streaming."""
        rid = payload.get("rid")
        # own json.dumps: httpx's json= refuses NaN, which the hint payload may carry
        body = json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"}
        try:
            async with self.slots:
                if not payload.get("stream"):
                    r = await self.http.post(self.url, content=body, headers=headers)
                    if r.status_code >= 400:
                        raise DriverError(f"request {rid}: {status_line(r.status_code, r.content)}")
                    return json.loads(r.content)
                async with self.http.stream("POST", self.url, content=body, headers=headers) as r:
                    if r.status_code >= 400:
                        raise DriverError(f"request {rid}: {status_line(r.status_code, await r.aread())}")
                    return await self._read_stream(r, rid)
        except (httpx.HTTPError, OSError) as e:
            raise DriverError(f"request {rid}: {error_line(e)}") from None
        except json.JSONDecodeError as e:
            raise DriverError(f"request {rid}: the answer is not JSON: {error_line(e)}") from None

    async def _read_stream(self, r: httpx.Response, rid: Any) -> dict[str, Any]:
        first: float | None = None
        last: dict[str, Any] | None = None
        ids: list[int] = []
        async for raw in r.aiter_lines():  # server-sent events: "data: {...}" lines, then "data: [DONE]"
            line = raw.strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if "error" in chunk:
                raise DriverError(f"request {rid}: {chunk['error'].get('message')}")
            if first is None and chunk.get("output_ids"):
                first = self.now()
            out = chunk.get("output_ids") or []
            ids = out if len(out) >= len(ids) else ids + out  # cumulative (default) or incremental
            last = chunk
        if last is None:
            raise DriverError(f"request {rid}: empty stream")
        last = dict(last)
        last["output_ids"] = ids
        last["_first_token"] = first
        return last

    async def run_call(self, task: Task, node_id: str, deps: Sequence[asyncio.Future]) -> None:
        if deps:
            await asyncio.gather(*deps)
        node = task.workflow.nodes[node_id]
        if node.gap_s > 0:
            await asyncio.sleep(node.gap_s * self.cfg.time_scale)
        ready = self.now()
        ids, segs = self.prompt_ids(task, node_id)
        rid = f"{self.tag}-t{task.task_id}-{node_id}"
        payload = self._payload(rid, ids, node.output_tokens, self._hint(task, node_id, ready, segs))
        predicted = _shared_run(segs, self._seen_seqs)
        self._seen_seqs.append(tuple(segs))  # its prompt enters the tree once prefilled
        out = await self._post(payload)
        finish = self.now()
        out_ids = list(out.get("output_ids") or [])
        self.outputs[(task.task_id, node_id)] = out_ids
        full = self._remember(segs, task.task_id, node_id, len(out_ids))
        self._finished_seqs[rid] = (tuple(segs), full)
        self.records.append(self._record(rid, task, node_id, ready, finish, len(ids), predicted, out, len(out_ids)))

    def _hint(self, task: Task, node_id: str, ready: float, segs) -> WorkflowHint:
        """What the plugin tells the policy about this call (topas/engines/sglang/hints.py)."""
        wf: Workflow = task.workflow
        node = wf.nodes[node_id]
        return WorkflowHint(
            task_id=task.task_id,
            node=node_id,
            stage=node.stage_id,
            agent=node.agent,
            template=task.template,
            task_arrival=self.wall(task.arrival * self.cfg.time_scale),
            prefix_tokens=wf.agents[node.agent].prefix_tokens,
            ready_time=self.wall(ready),
            downstream_agents=tuple(sorted({wf.nodes[c].agent for c in wf.children[node_id]})),
            segments=tuple(segs),
            template_spec=self.templates_json.get(task.template) if self.cfg.include_template_spec else None,
        )

    def _payload(self, rid: str, ids: list[int], output_tokens: int, hint: WorkflowHint) -> dict[str, Any]:
        """The /generate request: exact output length, the hint on the configured channel(s)."""
        sampling: dict[str, Any] = {
            "max_new_tokens": int(output_tokens),
            "ignore_eos": True,
            "temperature": self.cfg.temperature,
        }
        payload: dict[str, Any] = {"rid": rid, "input_ids": ids, "sampling_params": sampling}
        if self.cfg.stream:
            payload["stream"] = True
        if self.cfg.hint_channel in ("kv_hints", "both"):
            payload["kv_hints"] = kv_hints_envelope(hint, message_id=rid)
        if self.cfg.hint_channel in ("custom_params", "both"):
            sampling["custom_params"] = custom_params_fallback(hint)
        if self.cfg.hint_channel not in ("kv_hints", "custom_params", "both"):
            raise DriverError(f"unknown hint_channel {self.cfg.hint_channel!r}")
        return payload

    def _record(self, rid: str, task: Task, node_id: str, ready: float, finish: float, prompt_tokens: int,
                predicted: int, out: dict[str, Any], n_out: int) -> CallRecord:
        """The call's record from the server's answer (its meta_info)."""
        node = task.workflow.nodes[node_id]
        meta = out.get("meta_info", {}) or {}
        details = meta.get("cached_tokens_details") or {}
        reason = meta.get("finish_reason")
        return CallRecord(
            rid=rid,
            task_id=task.task_id,
            node=node_id,
            stage=node.stage_id,
            agent=node.agent,
            task_arrival=task.arrival * self.cfg.time_scale,
            ready=ready,
            finish=finish,
            first_token=out.get("_first_token"),
            prompt_tokens=prompt_tokens,
            prefix_tokens=task.workflow.agents[node.agent].prefix_tokens,
            predicted_reuse_tokens=predicted,
            cached_tokens=int(meta.get("cached_tokens", 0) or 0),
            cached_tokens_device=details.get("device"),
            cached_tokens_host=details.get("host"),
            output_tokens=int(meta.get("completion_tokens", n_out) or 0),
            expected_output_tokens=int(node.output_tokens),
            e2e_latency_s=meta.get("e2e_latency"),
            num_retractions=int(meta.get("num_retractions", 0) or 0),
            finish_reason=(reason.get("type") if isinstance(reason, dict) else reason),
        )

    def _remember(self, segs: Sequence[tuple[str, int]], task_id: int, node_id: str, n_out: int) -> tuple:
        # SGLang caches prompt + output except the last sampled token (never fed back).
        out_sid = task_segment_id(task_id, _out_ref(node_id))
        full = tuple(segs) + ((out_sid, max(n_out - 1, 0)),)
        self._seen_seqs.append(full)
        return full

    def reuse_bounds(self) -> None:
        """`reuse_bound_tokens` of every record: the shared run against every other call's
        prompt and prompt + output, whatever order the server served them in."""
        for r in self.records:
            segs, _ = self._finished_seqs[r.rid]
            others = [seq for rid, pair in self._finished_seqs.items() if rid != r.rid for seq in pair]
            r.reuse_bound_tokens = _shared_run(segs, others)

    async def run_task(self, task: Task) -> None:
        delay = task.arrival * self.cfg.time_scale - self.now()
        if delay > 0:
            await asyncio.sleep(delay)
        futs: dict[str, asyncio.Future] = {}
        for node_id in task.workflow.topo_order:
            node = task.workflow.nodes[node_id]
            futs[node_id] = asyncio.ensure_future(self.run_call(task, node_id, [futs[d] for d in node.deps]))
        await asyncio.gather(*futs.values())
        if self.cfg.on_task_done is not None:
            self.cfg.on_task_done(task.task_id)

    async def run(self, meta: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        self.t0_mono = time.monotonic()
        self.t0_wall = time.time()
        if meta is not None:  # the replay's clock: record times are seconds after t0_wall
            meta.update(t0_wall=self.t0_wall, t0_mono=self.t0_mono, run_tag=self.tag)
        self.slots = asyncio.Semaphore(max(1, self.cfg.max_inflight))
        async with async_client(self.cfg.request_timeout_s, max(1, self.cfg.max_inflight)) as http:
            self.http = http
            tasks = [asyncio.ensure_future(self.run_task(t)) for t in self.trace.tasks]
            try:
                await asyncio.gather(*tasks)
            except BaseException:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)  # their requests end before the pool closes
                raise
        if self.cfg.reuse_bounds:
            self.reuse_bounds()
        if meta is not None:
            meta["wall_s"] = self.now()
        return [asdict(r) for r in sorted(self.records, key=lambda r: (r.finish, r.rid))]


def _shared_run(segs: Sequence[tuple[str, int]], seqs: Sequence[Sequence[tuple[str, int]]]) -> int:
    """Longest run of leading tokens `segs` shares with any of `seqs`, by segment identity
    (equal ids = equal tokens), capped at len(prompt) - 1: SGLang never matches the last
    prompt token (it is recomputed for the logits, `Req._compute_max_prefix_len`). Ignores
    eviction and timing: an upper bound on the server's `cached_tokens`, exact for calls
    served one after another in that order with enough KV pool."""
    best = 0
    for seq in seqs:
        n = 0
        for (sid, tokens), other in zip(segs, seq):
            if sid != other[0]:
                break
            n += min(tokens, other[1])
            if tokens != other[1]:
                break
        best = max(best, n)
    return min(best, max(sum(n for _, n in segs) - 1, 0))


def _in_ref(node_id: str):
    from topas.workflow import SegmentRef

    return SegmentRef("in", node_id)


def _out_ref(node_id: str):
    from topas.workflow import SegmentRef

    return SegmentRef("out", node_id)


async def run_trace(trace: Trace, cfg: DriverConfig, meta: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Replay `trace`; one dict per call (fields of `CallRecord`), in finish order.
    `meta` (optional) receives the replay clock: `t0_wall` (time.time() at replay time 0),
    `t0_mono`, `run_tag` (prefix of every request id) and, at the end, `wall_s`."""
    return await _Replay(trace, cfg).run(meta)


def run_trace_sync(trace: Trace, cfg: DriverConfig, meta: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return asyncio.run(run_trace(trace, cfg, meta))
