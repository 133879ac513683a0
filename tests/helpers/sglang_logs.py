"""A real SGLang replay's inputs to the record builder, made by hand: the driver's per-call
results and the plugin's decision and iteration logs of a 2-task chain (no sglang needed)."""

from __future__ import annotations

from topas.workflow import Agent, CallNode, SegmentRef, Task, Trace, Workflow, template_of


def chain(prefix=(("A", 600), ("B", 800)), inp=100, out=50) -> Workflow:
    agents = {n: Agent(n, p) for n, p in prefix}
    nodes, prev = {}, None
    for n, _ in prefix:
        nid = n.lower()
        nodes[nid] = CallNode(nid, n, inp, out, deps=(prev,) if prev else (),
                              history=(SegmentRef("out", prev),) if prev else ())
        prev = nid
    return Workflow("chain", agents, nodes)


def trace_of(wf: Workflow, arrivals=(0.0, 1.0)) -> Trace:
    return Trace("t", tuple(Task(i, a, wf, wf.name) for i, a in enumerate(arrivals)), {wf.name: template_of(wf)})


def fake_logs(t0: float = 1000.0):
    """Driver dicts, decision and iteration logs of a 2-task chain replay (agents A, B)."""
    tr = trace_of(chain(prefix=(("A", 60), ("B", 80)), inp=10, out=5))
    calls, decisions, iterations = [], [{"event": "start", "t": t0 - 5, "kv_pool_tokens": 4096,
                                         "max_running_requests": 8, "bytes_per_token": 512}], []
    t = 0.0
    for task in tr.tasks:
        for nid in ("a", "b"):
            rid = f"tag-t{task.task_id}-{nid}"
            node = task.workflow.nodes[nid]
            prompt = task.workflow.prompt_tokens(nid)
            cached = task.workflow.agents[node.agent].prefix_tokens if task.task_id == 1 else 0
            decisions.append({"event": "decision", "t": t0 + t, "wall_s": 0.001, "waiting": [rid], "running": [],
                              "resident": ["A"] if task.task_id else []})
            decisions.append({"event": "admitted", "t": t0 + t + 0.001, "rids": [rid]})
            iterations.append({"kind": "prefill", "start": t0 + t + 0.002, "duration": 0.01, "steps": 1,
                               "batch_size": 1, "tokens": prompt, "kv_used_tokens": 100, "tree_tokens": 90,
                               "evictable_tokens": 10, "host_tokens": None, "waiting": 0, "running": 0,
                               "first": [rid], "finished": []})
            iterations.append({"kind": "decode", "start": t0 + t + 0.012, "duration": 0.04, "steps": 4,
                               "batch_size": 1, "tokens": prompt + 1, "kv_used_tokens": 104, "tree_tokens": 90,
                               "evictable_tokens": 10, "host_tokens": None, "waiting": 0, "running": 1,
                               "first": [], "finished": [rid]})
            calls.append({"rid": rid, "task_id": task.task_id, "node": nid, "stage": nid, "agent": node.agent,
                          "ready": t, "finish": t + 0.06, "first_token": None, "prompt_tokens": prompt,
                          "prefix_tokens": task.workflow.agents[node.agent].prefix_tokens, "cached_tokens": cached,
                          "cached_tokens_device": cached, "cached_tokens_host": 0, "output_tokens": 5,
                          "expected_output_tokens": 5, "num_retractions": 0})
            t += 0.1
    iterations.insert(0, {"kind": "prefill", "start": t0 - 3, "duration": 0.01, "steps": 1, "batch_size": 1,
                          "tokens": 12, "first": ["warmup"], "finished": []})  # before the replay: dropped
    return tr, calls, decisions, iterations
