"""Calls that can never run: the simulator's own memory rules applied to one call alone.

Admission (`PrefillBudget.add_one`, topas/engines/sim/admission.py, a port of SGLang's
`PrefillAdder.add_one_req`) takes a waiting call only when

    extend + min(max_new_tokens - generated, clip_max_new_tokens) + 1 < free + evictable - reserved

with its matched prefix locked (so counted neither in `extend` nor on the right). The best case
is the call alone on the server: nothing running or reserved, every other cached token evictable.
Then, for a first admission (generated = 0), the condition is

    prompt + min(max_new_tokens, clip_max_new_tokens) + 1 < pool

where `max_new_tokens` is what the client sends (`make_request`, topas/engines/sim/entities.py):
the call's output length with `ignore_eos`, else `max_new_tokens_cap`. Once admitted a call keeps
its prompt and every output token but the last in the pool, and a decode step needs one free
token per running call (`SimEngine._run_decode` / `_retract`), so a call alone finishes only if

    prompt + output - 1 <= pool

(output = the call's length with `ignore_eos`, else at most `max_new_tokens_cap`). A call that
breaks either rule stalls the engine whatever the scheduler does; `check_trace_fits` finds the
first one before the simulation starts. Passing is necessary, not sufficient: a call preempted
late in its decode is re-admitted only if prompt + output + 1 < pool.
"""

from __future__ import annotations

from dataclasses import dataclass

from topas.config import ConfigError
from topas.workflow import Trace

CLIP_MAX_NEW_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION (SimEngineConfig.clip_max_new_tokens)


@dataclass(frozen=True)
class CallFit:
    """One call's memory needs against the pool (the numbers the error message shows)."""

    prompt: int
    output: int  # tokens it generates (the engine's length)
    reserved_output: int  # what admission reserves for the output: min(max_new_tokens, clip)
    pool: int

    @property
    def admission_tokens(self) -> int:
        return self.prompt + self.reserved_output + 1

    @property
    def admissible(self) -> bool:
        return self.admission_tokens < self.pool

    @property
    def peak_tokens(self) -> int:
        return self.prompt + self.output - 1

    @property
    def finishes(self) -> bool:
        return self.peak_tokens <= self.pool


def call_fit(prompt: int, output_tokens: int, pool_tokens: int, *, ignore_eos: bool = True,
             max_new_tokens_cap: int = 4096, clip_max_new_tokens: int = CLIP_MAX_NEW_TOKENS) -> CallFit:
    """The needs of one call (prompt and true output length, tokens), as the simulator counts them."""
    output = output_tokens if ignore_eos else min(output_tokens, max_new_tokens_cap)
    sent = output_tokens if ignore_eos else max_new_tokens_cap  # the client's max_new_tokens
    return CallFit(prompt, output, min(max(sent, 0), clip_max_new_tokens), pool_tokens)


def check_trace_fits(trace: Trace, pool_tokens: int, *, ignore_eos: bool = True, max_new_tokens_cap: int = 4096,
                     clip_max_new_tokens: int = CLIP_MAX_NEW_TOKENS) -> None:
    """ConfigError (one line: the task, the call, the arithmetic) for the first call of `trace` that
    can never be admitted or never finish in a KV pool of `pool_tokens` tokens."""
    seen: set[tuple[int, int]] = set()
    for task in trace.tasks:
        wf = task.workflow
        for nid in wf.topo_order:
            node = wf.nodes[nid]
            prompt = wf.prompt_tokens(nid)
            if (prompt, node.output_tokens) in seen:
                continue
            seen.add((prompt, node.output_tokens))
            fit = call_fit(prompt, node.output_tokens, pool_tokens, ignore_eos=ignore_eos,
                           max_new_tokens_cap=max_new_tokens_cap, clip_max_new_tokens=clip_max_new_tokens)
            where = f"workload '{trace.name}': task {task.task_id}, call '{nid}' (agent '{node.agent}')"
            if not fit.admissible:
                out = f"output {fit.reserved_output}"
                if fit.reserved_output != node.output_tokens:
                    sent = node.output_tokens if ignore_eos else max_new_tokens_cap
                    out += (f" (reserved: min(max_new_tokens {sent}, clip {clip_max_new_tokens}))" if ignore_eos else
                            f" (reserved: min(backend.max_new_tokens_cap {sent}, clip {clip_max_new_tokens}))")
                raise ConfigError(
                    f"{where} can never be admitted: prompt {fit.prompt} + {out} + 1 tokens = {fit.admission_tokens}"
                    f" >= KV pool {fit.pool} tokens (admission needs prompt + output + 1 < pool)"
                )
            if not fit.finishes:
                out = f"output {fit.output}" + ("" if fit.output == node.output_tokens else
                                                 f" (of {node.output_tokens}, capped by backend.max_new_tokens_cap)")
                raise ConfigError(
                    f"{where} can never finish: prompt {fit.prompt} + {out} - 1 tokens = {fit.peak_tokens}"
                    f" > KV pool {fit.pool} tokens (a running call holds its prompt and all but its last output token)"
                )


def check_engine_fits(trace: Trace, cfg) -> None:
    """`check_trace_fits` with a SimEngineConfig's pool and client settings."""
    check_trace_fits(trace, cfg.kv_pool_tokens, ignore_eos=cfg.ignore_eos, max_new_tokens_cap=cfg.max_new_tokens_cap,
                     clip_max_new_tokens=cfg.clip_max_new_tokens)
