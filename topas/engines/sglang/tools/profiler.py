"""Measure a running SGLang server's iteration latency and write a latency profile
(`topas/engines/latency/measured.py` documents the file and how the simulator reads it).

    python -m topas.engines.sglang.tools.profiler --out profile.json                 # starts its own CPU server (tiny model)
    python -m topas.engines.sglang.tools.profiler --device gpu --model-path DIR --out p.json   # its own GPU server
    python -m topas.engines.sglang.tools.profiler --url http://127.0.0.1:30000 \\
        --iteration-log /path/iterations.jsonl --out p.json                   # a server already running

Source of the timings: the plugin's iteration log (`../plugin/iteration_log.py`, hook on
`Scheduler.process_batch_result`), written inside the scheduler process: one record per
prefill iteration or decode stretch, tiled back to back as SGLang's own step accounting
does, so a decode step's time is the scheduler's cadence (forward pass + its own Python
work per iteration) and client or HTTP time never enters it. A server started elsewhere
must have it on: environment `TOPAS_ITERATION_LOG=<file>` (the plugin needs no policy for
it), the same file given as `--iteration-log`.

The grid (requests sent one cell at a time, each with fresh token ids, so nothing is
cached except what a cell puts there itself):
- prefill (extend x cached prefix): for prefix P > 0 a request of P tokens first (it leaves
  them in the radix cache), then P + E tokens with `max_new_tokens=1`: the prefill
  iteration that produced that request's first token, checked to have computed E tokens;
  the median of `--repeats` samples. The server was idle before, so the iteration counts
  from its launch.
- decode (batch size B x context C): a request of C - 8 fresh tokens first (cached), then B
  concurrent requests of those C - 8 plus 8 fresh tokens each with `max_new_tokens=S`
  (sharing the prefix keeps B x C within the KV pool; attention still reads C tokens per
  request): the decode stretches with batch size B (step = duration / steps; context =
  the stretches' mean per request over their steps); the median of the repeats. Cells
  that do not fit the KV pool are left null (the predictor fills them).
- batched prefill: the prefill iterations of several requests seen in the decode cells
  give `prefill_batch_shared_s`, the per-iteration cost a batch pays once (median of
  (sum of the single-request times - batch time) / (n - 1)).
- client path: the workflow driver (`../client/driver.py`, the client of every real run, with its
  workflow hints) replays one-call tasks one after another (`max_new_tokens=1`): call
  released -> launch of its prefill iteration (`submit`) and end of that iteration -> answer
  back in the driver (`return`), medians: the driver, HTTP, tokenizer manager and
  detokenizer path that the simulator does not run (`request_latency_s`); then one-call
  tasks that all arrive at once: the median spacing of their release times (`dispatch`:
  the driver prepares and sends one call at a time). Submit and dispatch at two prompt
  sizes (128 and 2048 tokens): a base plus a per-token term.

The same command works against a GPU server (`--grid gpu`: longer prompts, larger batches).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from topas.engines.latency.measured import FORMAT
from topas.engines.sglang.tools.profiler_io import Client, IterationTail, ProfileRunError, median_or_none, server_facts


@dataclass(frozen=True)
class Grid:
    prefill_extend: tuple[int, ...]
    prefill_prefix: tuple[int, ...]
    decode_batch: tuple[int, ...]
    decode_context: tuple[int, ...]
    decode_steps: int = 24
    repeats: int = 3


GRIDS = {
    # the tiny CPU model: 4096-token context and KV pool (~2.5 min)
    "cpu": Grid((8, 32, 64, 128, 256, 512, 1024, 2048, 3072), (0, 128, 256, 512, 1024, 1536, 2048),
                (1, 2, 4, 8, 16, 32), (32, 128, 256, 512, 1024, 2048), decode_steps=32, repeats=5),
    # a 7-32B model on one GPU (not run yet: no GPU here); ~1-2 min
    "gpu": Grid((128, 1024, 4096, 8192), (0, 4096, 16384), (1, 8, 32, 128, 256), (512, 2048, 8192), 32, 3),
    "quick": Grid((16, 256, 1024), (0, 512), (1, 4, 16), (64, 512), 12, 1),
}


def _line(points: Sequence[tuple[float, float | None]]) -> tuple[float, float]:
    """(base, per unit) of the line through two (x, y) points, both >= 0."""
    (x1, y1), (x2, y2) = points
    y1, y2 = y1 or 0.0, y2 or 0.0
    per = max((y2 - y1) / (x2 - x1), 0.0)
    return max(y1 - per * x1, 0.0), per


def measure_round_trip(client: Client, tail: IterationTail, calls: int = 16,
                       prompts: tuple[int, int] = (128, 2048)) -> dict[str, float]:
    """The client path of the workflow driver, for two prompt sizes (a line through them):
    driver -> scheduler (`submit`) and scheduler -> driver (`return`) of one-call tasks replayed
    one after another on the idle server (medians), and the release spacing of one-call tasks
    that all arrive at once (`dispatch`, median)."""
    from topas.engines.sglang.client.driver import DriverConfig, run_trace_sync
    from topas.workflow import Agent, CallNode, Task, Trace, Workflow, template_of

    tag = uuid.uuid4().hex[:6]

    def replay(prompt: int, arrivals: Sequence[float], run: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        wf = Workflow("roundtrip", {f"A{prompt}": Agent(f"A{prompt}", prompt)}, {"n": CallNode("n", f"A{prompt}", 8, 1)})
        tasks = tuple(Task(i, t, wf, "roundtrip") for i, t in enumerate(arrivals))
        trace = Trace(f"roundtrip-{tag}", tasks, {"roundtrip": template_of(wf)})
        meta: dict[str, Any] = {}
        cfg = DriverConfig(base_url=client.base_url, vocab_size=client.vocab, run_tag=f"{run}{prompt}{tag}",
                           reuse_bounds=False)
        return run_trace_sync(trace, cfg, meta), meta

    submit, ret, dispatch = [], [], []
    for prompt in prompts:
        burst, _ = replay(prompt, [0.0] * calls, "burst")
        ready = sorted(c["ready"] for c in burst)
        dispatch.append((prompt + 8, median_or_none([b - a for a, b in zip(ready, ready[1:])])))
        tail.new(0.0)
        recs, meta = replay(prompt, [0.05 * i for i in range(calls)], "rt")
        by_rid = {rid: r for r in tail.new() if r["kind"] == "prefill" for rid in r.get("first", ())}
        sub, back = [], []
        for c in recs:
            it = by_rid.get(c["rid"])
            if it is None or it["batch_size"] != 1:
                continue
            sub.append(it["start"] - (meta["t0_wall"] + c["ready"]))
            back.append(meta["t0_wall"] + c["finish"] - (it["start"] + it["duration"]))
        submit.append((prompt + 8, median_or_none(sub)))
        ret += back
    s0, s1 = _line(submit)
    d0, d1 = _line(dispatch)
    return {"submit": s0, "submit_per_token": s1, "return": max(median_or_none(ret) or 0.0, 0.0),
            "dispatch": d0, "dispatch_per_token": d1}


def _cells_by_rounds(cells: Sequence[tuple], sample, repeats: int) -> dict[tuple, list[float]]:
    """`repeats` rounds over all cells (not `repeats` samples of one cell in a row): a slow
    spell of the machine then touches one sample of many cells, and the median drops it."""
    out: dict[tuple, list[float]] = {c: [] for c in cells}
    for _ in range(repeats):
        for c in cells:
            v = sample(*c)
            if v is not None:
                out[c].append(v)
    return out


def _table(rows: Sequence[int], cols: Sequence[int], got: dict[tuple, list[float]]) -> list[list[float | None]]:
    return [[median_or_none(got[(r, c)]) if (r, c) in got else None for c in cols] for r in rows]


def measure_prefill(client: Client, tail: IterationTail, grid: Grid, limit: int, say) -> tuple[list, list]:
    """The prefill table (rows: extend, columns: prefix) and the raw samples."""
    samples: list[dict] = []

    def sample(e: int, p: int) -> float | None:
        prefix = client.fresh(p) if p else []
        if p:
            client.generate(prefix, 1)
        tail.new(0.0)
        rid, _, _ = client.generate(prefix + client.fresh(e), 1)
        rec = next((r for r in tail.new() if r["kind"] == "prefill" and rid in r.get("first", ())), None)
        if rec is None or rec.get("extend_tokens") != e:
            return None  # not the iteration asked for (prefix evicted meanwhile, a foreign request)
        samples.append({"kind": "prefill", "extend": e, "prefix": p, "batch": 1, "seconds": rec["duration"]})
        return rec["duration"]

    cells = [(e, p) for e in grid.prefill_extend for p in grid.prefill_prefix if e + p + 1 <= limit]
    table = _table(grid.prefill_extend, grid.prefill_prefix, _cells_by_rounds(cells, sample, grid.repeats))
    for e, row in zip(grid.prefill_extend, table):
        say(f"prefill extend {e:>6}: " + " ".join("-" if v is None else f"{v * 1e3:.1f}ms" for v in row))
    return table, samples


def measure_decode(client: Client, tail: IterationTail, grid: Grid, pool: int, limit: int,
                   say) -> tuple[list, list, list, list]:
    """The decode table (rows: batch size, columns: context), raw samples, multi-request prefills."""
    s = grid.decode_steps
    own = 8  # fresh tokens per request after the shared part
    samples: list[dict] = []
    batched: list[dict] = []
    ex = ThreadPoolExecutor(max_workers=max(grid.decode_batch))

    def run_batch(prompts: list[list[int]], steps: int) -> None:
        for f in [ex.submit(client.generate, ids, steps) for ids in prompts]:
            f.result()

    def sample(b: int, c: int) -> float | None:
        shared = max(c - own, 0)
        prefix = client.fresh(shared) if shared else []
        if shared:
            client.generate(prefix, 1)
        tail.new(0.0)
        run_batch([prefix + client.fresh(c - shared) for _ in range(b)], s)
        recs = tail.new()
        dec = [r for r in recs if r["kind"] == "decode" and r["batch_size"] == b]
        n = sum(r["steps"] for r in dec)
        if n == 0:
            return None
        step = sum(r["duration"] for r in dec) / n
        ctx = sum((r["tokens"] + (r["steps"] - 1) / 2) * r["steps"] for r in dec) / n
        samples.append({"kind": "decode", "batch": b, "context": ctx, "steps": n, "seconds": step})
        batched.extend(
            {"batch": r["batch_size"], "extend": r["extend_tokens"], "prefix": r["tokens"] - r["extend_tokens"],
             "seconds": r["duration"]}
            for r in recs if r["kind"] == "prefill" and r["batch_size"] > 1 and r.get("extend_tokens")
        )
        return step

    def fits(b: int, c: int) -> bool:
        shared = max(c - own, 0)
        return shared + b * (c - shared + s + 1) <= 0.9 * pool and c + s <= limit

    try:
        for b in grid.decode_batch:  # warm-up: the first batch of a new size runs slower (allocations)
            if fits(b, grid.decode_context[0]):
                run_batch([client.fresh(grid.decode_context[0]) for _ in range(b)], 4)
        cells = [(b, c) for b in grid.decode_batch for c in grid.decode_context if fits(b, c)]
        got = _cells_by_rounds(cells, sample, grid.repeats)
    finally:
        ex.shutdown(wait=False)
    table = _table(grid.decode_batch, grid.decode_context, got)
    for b, row in zip(grid.decode_batch, table):
        say(f"decode batch {b:>4}: " + " ".join("-" if v is None else f"{v * 1e3:.2f}ms" for v in row))
    cols = [c + s // 2 for c in grid.decode_context]  # mean context over the stretch
    return table, samples, batched, cols


def batch_shared_seconds(batched: list[dict], single) -> float:
    """Per-iteration cost a batch of n prefills pays once: median over the observed batches of
    (n x single(extend / n, prefix / n) - batch time) / (n - 1), at least 0."""
    xs = []
    for r in batched:
        n = r["batch"]
        alone = n * single([(max(r["extend"] // n, 1), r["prefix"] // n)])
        xs.append((alone - r["seconds"]) / (n - 1))
    return max(median_or_none(xs) or 0.0, 0.0)


def measure(client: Client, iteration_log: str | Path, grid: Grid, context_len: int | None = None, say=print) -> dict:
    facts = server_facts(client, context_len)
    pool = facts["kv_pool_tokens"] or 4096
    limit = min(facts["context_len"] or pool, pool)
    tail = IterationTail(iteration_log)
    client.generate(client.fresh(8), 2)  # the log is live and the server warm
    if not any(r["kind"] in ("prefill", "decode") for r in tail.new(0.2)):
        raise ProfileRunError(f"no iteration records in {iteration_log}: start the server with TOPAS_ITERATION_LOG={iteration_log}")
    t0 = time.monotonic()
    trip = measure_round_trip(client, tail)
    say(f"client path (driver): submit {trip['submit'] * 1e3:.2f} ms + {trip['submit_per_token'] * 1e6:.2f} us/token, "
        f"return {trip['return'] * 1e3:.2f} ms, dispatch {trip['dispatch'] * 1e3:.2f} ms + "
        f"{trip['dispatch_per_token'] * 1e6:.2f} us/token between calls due together")
    pre, pre_samples = measure_prefill(client, tail, grid, limit, say)
    dec, dec_samples, batched, cols = measure_decode(client, tail, grid, pool, limit, say)
    data = {
        "format": FORMAT,
        "meta": {
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "server": facts,
            "grid": asdict(grid),
            "method": "topas.engines.sglang.tools.profiler: plugin iteration log, medians over repeats",
            "measure_s": round(time.monotonic() - t0, 1),
        },
        "prefill": {"extend_tokens": list(grid.prefill_extend), "prefix_tokens": list(grid.prefill_prefix), "seconds": pre},
        "decode": {"batch_size": list(grid.decode_batch), "context_tokens": cols, "seconds": dec},
        "request_latency_s": trip,
        "samples": pre_samples + dec_samples + [dict(kind="prefill_batch", **b) for b in batched],
    }
    from topas.engines.latency.measured import ProfileLatency

    single = ProfileLatency(data, source="measured profile")
    data["prefill_batch_shared_s"] = batch_shared_seconds(batched, single.prefill)
    ProfileLatency(data, source="measured profile")  # the file it writes is one the predictor accepts
    return data


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m topas.engines.sglang.tools.profiler", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="profile file to write (JSON)")
    ap.add_argument("--url", default=None, help="a running server (with --iteration-log); default: start one")
    ap.add_argument("--iteration-log", default=None, help="the TOPAS_ITERATION_LOG file of the server at --url")
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu", help="profile of the server this command starts")
    ap.add_argument("--model-path", default=None, help="model folder (config.json; dummy weights); default: tiny CPU model")
    ap.add_argument("--max-total-tokens", type=int, default=None, help="KV pool of the server it starts (cpu: 4096)")
    ap.add_argument("--extra-args", default="", help="more sglang server args, space-separated")
    ap.add_argument("--policy", default=None, help="a topas policy in the server it starts (its plugin's work per pass "
                                                    "is then part of every timing); default: plain SGLang")
    ap.add_argument("--grid", choices=sorted(GRIDS), default=None, help="grid (default: the device's)")
    ap.add_argument("--repeats", type=int, default=None, help="samples per cell (median)")
    ap.add_argument("--context-len", type=int, default=None, help="the model's context (default: from config.json)")
    ap.add_argument("--vocab-size", type=int, default=None, help="token ids below this (default: from config.json, else 1000)")
    a = ap.parse_args(argv)
    if (a.url is None) != (a.iteration_log is None):
        ap.error("--url and --iteration-log go together")
    return a


def _vocab(model_path: str | None, given: int | None) -> int:
    if given:
        return given
    try:
        return int(json.loads((Path(model_path) / "config.json").read_text())["vocab_size"])
    except (TypeError, OSError, ValueError, KeyError):
        return 1000


def profile_server(base_url: str, iteration_log: str | Path, out: str | Path, grid: Grid, vocab: int,
                   context_len: int | None = None, say=print) -> dict:
    """Measure the server at `base_url` (its iteration log at `iteration_log`) and write `out`."""
    with Client(base_url, vocab) as client:
        data = measure(client, iteration_log, grid, context_len, say)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(data, indent=1) + "\n")
    return data


def main(argv: Sequence[str] | None = None) -> int:
    a = parse_args(argv)
    grid = GRIDS[a.grid or a.device]
    if a.repeats:
        grid = Grid(**{**asdict(grid), "repeats": a.repeats})
    say = lambda m: print(f"[profile {time.strftime('%H:%M:%S')}] {m}", flush=True)  # noqa: E731
    try:
        if a.url:
            with Client(a.url, 1000) as client:
                vocab = _vocab(client.get("/get_server_info").get("model_path"), a.vocab_size)
            profile_server(a.url, a.iteration_log, a.out, grid, vocab, a.context_len, say)
        else:
            import tempfile

            from topas.engines.sglang.client.server import TINY_CPU_MODEL, ServerConfig, SGLangServer

            work = Path(tempfile.mkdtemp(prefix="topas-profile-"))
            model = Path(a.model_path) if a.model_path else TINY_CPU_MODEL
            pool = a.max_total_tokens if a.max_total_tokens else (4096 if a.device == "cpu" else None)
            cfg = ServerConfig(model_path=model, profile=a.device, max_total_tokens=pool, policy=a.policy,
                               extra_args=[x for x in a.extra_args.split() if x],
                               iteration_log=work / "iterations.jsonl", log_path=work / "server.log")
            say(f"starting sglang ({a.device}, {model}); server log {cfg.log_path}")
            with SGLangServer(cfg) as srv:
                say(f"server up in {srv.startup_s:.0f} s")
                profile_server(srv.base_url, cfg.iteration_log, a.out, grid, _vocab(str(model), a.vocab_size),
                               a.context_len, say)
    except (OSError, ProfileRunError, ValueError, RuntimeError) as e:
        print(f"error: {' '.join(str(e).split())[:400]}", file=sys.stderr)
        return 1
    say(f"-> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
