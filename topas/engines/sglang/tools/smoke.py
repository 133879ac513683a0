"""Smoke benchmark of the real SGLang server: start-up time, throughput, prefix reuse.

    python -m topas.engines.sglang.tools.smoke [--policy fcfs] [--profile cpu] [--model DIR] [--out result.json]

Starts the server (tiny CPU model by default), measures the time to /health 200, one
request's decode speed, the aggregate speed of 16 concurrent requests, and checks
that a second request sharing a prefix reports it as `cached_tokens`. Prints one
JSON object. Exit code 1 if the prefix was not reused.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from topas.engines.sglang.client.server import TINY_CPU_MODEL, ServerConfig, SGLangServer


def _generate(srv: SGLangServer, ids: list[int], n: int) -> dict:
    return srv.post("/generate", {"input_ids": ids,
                                  "sampling_params": {"max_new_tokens": n, "ignore_eos": True, "temperature": 0.0}})


def measure(srv: SGLangServer, prompt_len: int = 64, out_len: int = 128, concurrency: int = 16) -> dict:
    _generate(srv, [5] * 8, 4)  # warm-up
    t = time.monotonic()
    one = _generate(srv, [(7 * i) % 900 + 10 for i in range(prompt_len)], out_len)
    single_s = time.monotonic() - t
    prompts = [[(13 * i + 31 * k) % 900 + 10 for i in range(prompt_len)] for k in range(concurrency)]
    t = time.monotonic()
    with ThreadPoolExecutor(concurrency) as ex:  # the server's pooled client is shared by the threads
        outs = list(ex.map(lambda p: _generate(srv, p, out_len), prompts))
    multi_s = time.monotonic() - t
    shared = [(11 * i) % 900 + 10 for i in range(prompt_len)]
    _generate(srv, shared + [1, 2, 3], 4)
    second = _generate(srv, shared + [4, 5, 6], 4)
    return {
        "startup_s": round(srv.startup_s or 0.0, 2),
        "single_request_tok_s": round(len(one["output_ids"]) / single_s, 1),
        "single_request_s": round(single_s, 3),
        f"concurrent{concurrency}_tok_s": round(sum(len(o["output_ids"]) for o in outs) / multi_s, 1),
        f"concurrent{concurrency}_s": round(multi_s, 3),
        "prompt_tokens": prompt_len,
        "output_tokens": out_len,
        "shared_prefix_tokens": prompt_len,
        "cached_tokens_second_request": second["meta_info"].get("cached_tokens"),
        "cached_tokens_details": second["meta_info"].get("cached_tokens_details"),
        "server_processes": len(srv.pids()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default=None, help="topas policy for the plugin (default: plain SGLang)")
    ap.add_argument("--profile", default="cpu", choices=["cpu", "gpu"])
    ap.add_argument("--model", default=str(TINY_CPU_MODEL))
    ap.add_argument("--log", default=None, help="server log file")
    ap.add_argument("--out", default=None, help="also write the JSON result here")
    ap.add_argument("extra", nargs="*", help="extra sglang server args (after --)")
    a = ap.parse_args(argv)
    cfg = ServerConfig(model_path=a.model, profile=a.profile, policy=a.policy, log_path=a.log, extra_args=a.extra)
    with SGLangServer(cfg) as srv:
        result = measure(srv)
        pids = srv.pids()
    from topas.engines.sglang.client.processes import processes_alive

    result["processes_left_after_stop"] = len(processes_alive(pids))
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")
    ok = result["cached_tokens_second_request"] == result["shared_prefix_tokens"] and not result["processes_left_after_stop"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
