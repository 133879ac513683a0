"""Unit tests of the SGLang adapter and plugin controller against real sglang 0.5.23
objects on CPU: `Req`, `SamplingParams`, the kv_hints envelope types, the legacy
`RadixCache` and `UnifiedRadixCache` with both tree cores (Python and Rust)."""

from __future__ import annotations

import json
from array import array
from dataclasses import dataclass, field
from typing import Any

import pytest
from sglang_support import require_sglang  # noqa: E402

require_sglang()

import msgspec  # noqa: E402
import torch  # noqa: E402
from sglang.srt.managers.kv_hints import KvHintsEnvelope, decode_kv_hints_envelope  # noqa: E402
from sglang.srt.managers.schedule_batch import Req  # noqa: E402
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams  # noqa: E402
from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey  # noqa: E402
from sglang.srt.mem_cache.unified_cache.components import ComponentType  # noqa: E402
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402

from topas.engines.sglang import hints  # noqa: E402
from topas.engines.sglang.costs import LinearCostModel  # noqa: E402
from topas.engines.sglang.jsonl import DecisionLog  # noqa: E402
from topas.engines.sglang.plugin import adapter, cache_probe  # noqa: E402
from topas.engines.sglang.plugin.controller import Controller  # noqa: E402
from topas.policy import Decision, Policy  # noqa: E402
from topas.policy.events import RequestFinished, RequestReady, TaskArrived  # noqa: E402
from topas.workflow import Agent, TemplateStage, WorkflowTemplate  # noqa: E402

pytestmark = pytest.mark.sglang

# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------

PREFIX_A = list(range(100, 132))  # 32 tokens
PREFIX_B = list(range(200, 224))  # 24 tokens


def hint(task: int, node: str, agent: str, prefix: int, **kw: Any) -> hints.WorkflowHint:
    return hints.WorkflowHint(
        task_id=task, node=node, stage=kw.pop("stage", node), agent=agent, template="tpl",
        task_arrival=kw.pop("task_arrival", 10.0), prefix_tokens=prefix, **kw,
    )


def make_req(rid: str, ids: list[int], h: hints.WorkflowHint | None = None, channel: str = "kv_hints") -> Req:
    custom = hints.custom_params_fallback(h) if (h is not None and channel == "custom_params") else None
    sp = SamplingParams(max_new_tokens=8, ignore_eos=True, custom_params=custom)
    env = decode_kv_hints_envelope(hints.kv_hints_envelope(h, rid)) if (h is not None and channel == "kv_hints") else None
    return Req(rid, "", array("q", ids), sp, kv_hints=env)


def make_cache(kind: str, size: int = 256) -> tuple[Any, TokenToKVPoolAllocator]:
    alloc = TokenToKVPoolAllocator(size, torch.bfloat16, "cpu", None, need_sort=False)
    if kind == "legacy":
        params = CacheInitParams(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=alloc, page_size=1)
        return RadixCache(params), alloc
    backend = kind.split("-")[1]
    params = CacheInitParams(
        disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=alloc, page_size=1,
        tree_components=(ComponentType.FULL,), tree_core_backend=backend,
    )
    cache = UnifiedRadixCache(params)
    return cache, alloc


def insert(cache: Any, alloc: TokenToKVPoolAllocator, ids: list[int]) -> None:
    """What the scheduler does when a request finishes: insert, free the duplicate slots."""
    value = alloc.alloc(len(ids))
    assert value is not None, "test pool too small"
    res = cache.insert(InsertParams(key=RadixKey(array("q", ids)), value=value))
    alloc.free(value[: res.prefix_len])


CACHES = ["unified-python", "unified-rust", "legacy"]

TEMPLATE = WorkflowTemplate(
    "tpl",
    {"A": Agent("A", 32), "B": Agent("B", 24)},
    {
        "s1": TemplateStage("s1", "A"),
        "s2": TemplateStage("s2", "B", ("s1",)),
        "s3": TemplateStage("s3", "A", ("s2",), expected_count=2.0),
    },
)

# ----------------------------------------------------------------------------------------------
# the workflow hint through sglang's own types
# ----------------------------------------------------------------------------------------------


def test_hint_reaches_req_kv_hints_through_ipc_encoding():
    h = hint(7, "s2", "B", 24, ready_time=12.5, downstream_agents=("A",), segments=(("agent:B", 24), ("t7:s2:in", 9)),
             template_spec=hints.template_to_json(TEMPLATE))
    envelope = hints.kv_hints_envelope(h, "m1")
    json.dumps(envelope)  # plain JSON, as the HTTP body carries it
    decoded = decode_kv_hints_envelope(envelope)  # what GenerateReqInput normalisation does
    assert isinstance(decoded, KvHintsEnvelope)
    # tokenizer manager -> scheduler is msgpack IPC (msgspec structs)
    wire = msgspec.msgpack.decode(msgspec.msgpack.encode(decoded), type=KvHintsEnvelope)
    req = Req("r1", "", array("q", [1, 2, 3]), SamplingParams(max_new_tokens=4), kv_hints=wire)
    got = hints.hint_from_req(req)
    assert got == h
    assert hints.template_from_json(got.template_spec).stages == TEMPLATE.stages


def test_hint_via_custom_params_fallback_and_foreign_requests():
    h = hint(3, "s1", "A", 32, downstream_agents=("B",))
    req = make_req("r1", PREFIX_A + [5], h, channel="custom_params")
    assert req.kv_hints is None
    assert hints.hint_from_req(req) == h
    assert hints.hint_from_req(make_req("r2", [1, 2, 3])) is None


def test_generate_req_input_accepts_the_envelope():
    from sglang.srt.managers.io_struct import GenerateReqInput

    h = hint(1, "s1", "A", 32)
    obj = GenerateReqInput(input_ids=PREFIX_A + [9], sampling_params={"max_new_tokens": 2}, kv_hints=hints.kv_hints_envelope(h))
    obj.normalize_batch_and_arguments()
    env = obj.kv_hints[0] if isinstance(obj.kv_hints, list) else obj.kv_hints
    assert isinstance(env, KvHintsEnvelope)
    assert env.actions[0].action_type == "topas.workflow" and env.actions[0].action_version == "v1"


def test_malformed_payload_is_a_one_line_error():
    bad = {"protocol_version": "1", "message_id": "m", "actions": [
        {"action_id": "a", "action_type": "topas.workflow", "action_version": "v1", "payload": {"node": "x"}}]}
    req = Req("r", "", array("q", [1, 2]), SamplingParams(max_new_tokens=1), kv_hints=decode_kv_hints_envelope(bad))
    with pytest.raises(hints.HintError, match="lacks task_id"):
        hints.hint_from_req(req)
    # other action types and versions are ignored (kv_hints consumers ignore what they do not implement)
    other = {"protocol_version": "1", "message_id": "m", "actions": [
        {"action_id": "a", "action_type": "topas.workflow", "action_version": "v2", "payload": {}},
        {"action_id": "b", "action_type": "hicache.pin", "action_version": "v1", "payload": {}}]}
    req = Req("r", "", array("q", [1, 2]), SamplingParams(max_new_tokens=1), kv_hints=decode_kv_hints_envelope(other))
    assert hints.hint_from_req(req) is None


def test_control_envelope_round_trip():
    env = decode_kv_hints_envelope(hints.control_envelope("lpm", {"fcfs_above_waiting": 64}))
    req = Req("c", "", array("q", [3]), SamplingParams(max_new_tokens=1), kv_hints=env)
    assert hints.control_from_req(req) == ("lpm", {"fcfs_above_waiting": 64})
    assert hints.hint_from_req(req) is None


# ----------------------------------------------------------------------------------------------
# cache probes and pins on the real caches
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", CACHES)
def test_device_match_is_read_only(kind):
    cache, alloc = make_cache(kind)
    insert(cache, alloc, PREFIX_A + [1, 2, 3, 4])
    probe = cache_probe.CacheProbe(cache)
    before = cache.evictable_size()
    n, node, span = probe.device_match(probe.key(PREFIX_A + [9]))
    assert n == 32 and span == 36  # the match ends inside the node: not split
    n2, _, span2 = probe.device_match(probe.key(PREFIX_A))
    assert (n2, span2) == (32, 36)
    assert cache.evictable_size() == before
    assert probe.device_tokens([7, 7, 7]) == 0
    assert probe.host_tokens(PREFIX_A) == 0  # no host tier attached


@pytest.mark.parametrize("kind", CACHES)
def test_pinned_prefix_survives_eviction_that_takes_the_unpinned_one(kind):
    cache, alloc = make_cache(kind, size=128)
    insert(cache, alloc, PREFIX_A + [1, 2, 3, 4])  # older: plain LRU evicts it first
    insert(cache, alloc, PREFIX_B + [5, 6, 7, 8])
    probe = cache_probe.CacheProbe(cache)
    handle = probe.pin(PREFIX_A)
    assert handle is not None and handle.tokens == 32
    # the pin split the node at the prefix boundary: exactly the prefix is locked
    assert probe.device_match(probe.key(PREFIX_A))[2] == 32
    assert cache.protected_size() == 32
    cache.evict(EvictParams(num_tokens=1000))
    assert probe.device_tokens(PREFIX_A) == 32  # pinned: kept
    assert probe.device_tokens(PREFIX_A + [1, 2]) == 32  # its unpinned tail went
    assert probe.device_tokens(PREFIX_B) == 0  # the more recently used, unpinned prefix went
    probe.unpin(handle)
    assert cache.protected_size() == 0
    cache.evict(EvictParams(num_tokens=1000))
    assert probe.device_tokens(PREFIX_A) == 0
    assert alloc.available_size() == 128


@pytest.mark.parametrize("kind", CACHES)
def test_pin_refuses_a_prefix_not_on_device(kind):
    cache, alloc = make_cache(kind)
    insert(cache, alloc, PREFIX_A[:10])
    probe = cache_probe.CacheProbe(cache)
    assert probe.pin(PREFIX_A) is None
    assert probe.pin([]) is None
    assert cache.protected_size() == 0


# ----------------------------------------------------------------------------------------------
# SGLang state -> view
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["unified-rust", "legacy"])
def test_view_from_real_reqs_and_cache(kind):
    cache, alloc = make_cache(kind)
    insert(cache, alloc, PREFIX_A + [1, 2, 3])
    probe = cache_probe.CacheProbe(cache)
    h_wait = hint(1, "s3", "A", 32, ready_time=11.0, segments=(("agent:A", 32), ("t1:s3:in", 4)))
    h_wait2 = hint(2, "s1", "A", 32, ready_time=10.5, task_arrival=10.5)
    h_run = hint(1, "s2", "B", 24)
    w1 = make_req("w1", PREFIX_A + [1, 2, 9, 9], h_wait)
    w2 = make_req("w2", PREFIX_A, h_wait2)  # whole prompt cached: SGLang matches prompt - 1
    r1 = make_req("r1", PREFIX_B + [4, 4], h_run)
    r1.output_ids = array("q", [5, 6, 7])
    r1.retraction_count = 1
    infos_w = [
        adapter.request_info(w1, h_wait, probe=probe, ready_time=11.0, running=False),
        adapter.request_info(w2, h_wait2, probe=probe, ready_time=10.5, running=False),
    ]
    info_r = adapter.request_info(r1, h_run, probe=None, ready_time=9.0, running=True, admitted_time=11.5)
    assert infos_w[0].cached_tokens == 34 and infos_w[0].prompt_tokens == 36 and infos_w[0].prefix_tokens == 32
    assert infos_w[0].segments == (("agent:A", 32), ("t1:s3:in", 4))
    assert infos_w[1].cached_tokens == 31
    assert info_r.generated_tokens == 3 and info_r.preemptions == 1 and info_r.admitted_time == 11.5
    assert info_r.cached_tokens == info_r.prompt_tokens

    tasks = {1: adapter.TaskRecord(1, "tpl", 10.0, ["s1"], {"s1": 1}, attained_service=2.0), 2: adapter.TaskRecord(2, "tpl", 10.5)}
    prefixes = adapter.prefix_states({"A": 32, "B": 24}, {"A": PREFIX_A, "B": PREFIX_B}, probe, pinned={"A"}, running=[info_r])
    assert prefixes["A"].device_tokens == 32 and prefixes["A"].pinned and not prefixes["A"].in_use
    assert prefixes["B"].device_tokens == 0 and prefixes["B"].in_use
    cap = adapter.EngineCapacity(256, 40, cache.evictable_size(), 0, 0, 8)
    view = adapter.build_view(now=12.0, waiting=infos_w, running=[info_r], tasks=tasks, templates={"tpl": TEMPLATE},
                              prefixes=prefixes, capacity=cap, costs=LinearCostModel())
    assert [r.rid for r in view.waiting] == ["w2", "w1"]  # ready order
    t1 = view.tasks[1]
    assert t1.finished_nodes == ("s1",) and t1.running == ("r1",) and t1.waiting == ("w1",)
    assert t1.attained_service == pytest.approx(2.5)
    assert view.tasks[2].waiting == ("w2",)
    assert view.kv_evictable_tokens == 35 and view.max_running_requests == 8
    assert view.request("r1").agent == "B"


def test_queue_order_hold_back_and_restore():
    reqs = [make_req(f"q{i}", [1, 2, i + 3], hint(i, f"n{i}", "A", 1)) for i in range(4)]
    foreign = make_req("warmup", [1, 2])
    queue = [reqs[0], foreign, reqs[1], reqs[2], reqs[3]]
    visible = ["q0", "q1", "q2", "q3"]
    walk, held = adapter.order_waiting_queue(queue, Decision(admit=("q3", "q1", "gone")), visible)
    assert [r.rid for r in walk] == ["warmup", "q3", "q1"]
    assert [r.rid for r in held] == ["q0", "q2"]
    # SGLang admitted warmup and q3; q1 did not fit; a preempted request was requeued
    preempted = make_req("p", [1, 9], hint(9, "p", "A", 1))
    after = adapter.restore_order([reqs[1], preempted], held, queue)
    assert [r.rid for r in after] == ["q0", "q1", "q2", "p"]


def test_pin_changes():
    assert adapter.pin_changes({"A"}, frozenset({"A", "B"}), (), ()) == ({"B"}, set())
    assert adapter.pin_changes({"A", "B"}, frozenset({"B"}), (), ()) == (set(), {"A"})
    assert adapter.pin_changes({"A"}, None, (), ()) == (set(), {"A"})
    assert adapter.pin_changes({"A"}, frozenset({"B"}), {"A"}, ()) == ({"B"}, {"A"})


# ----------------------------------------------------------------------------------------------
# the plugin controller against a scheduler stand-in holding real sglang objects
# ----------------------------------------------------------------------------------------------


@dataclass
class FakeBatch:
    reqs: list = field(default_factory=list)


class FakeScheduler:
    def __init__(self, cache, alloc):
        self.tree_cache = cache
        self.token_to_kv_pool_allocator = alloc
        self.waiting_queue: list = []
        self.running_batch = FakeBatch()
        self.chunked_req = None
        self.max_running_requests = 4
        self.model_config = None


class Recorder(Policy):
    name = "recorder"

    def __init__(self, order=None, pin=None):
        super().__init__()
        self.events = []
        self.views = []
        self.order = order
        self.pin = pin

    def on_event(self, event):
        self.events.append(event)

    def schedule(self, view):
        self.views.append(view)
        rids = [r.rid for r in view.waiting]
        if self.order:
            rids = sorted(rids, key=self.order)
        return Decision(admit=tuple(rids[:2]), pin=self.pin)


def test_controller_orders_holds_pins_and_reports(tmp_path):
    cache, alloc = make_cache("unified-rust")
    sched = FakeScheduler(cache, alloc)
    policy = Recorder(order=lambda rid: -int(rid[1:]), pin=frozenset({"A"}))
    log = DecisionLog(str(tmp_path / "d.jsonl"))
    clock = iter(range(100, 1000)).__next__
    ctl = Controller(sched, policy, log, templates={"tpl": TEMPLATE}, clock=lambda: float(clock()))
    hs = [hint(1, f"n{i}", "A", 32, ready_time=50.0 + i, segments=(("agent:A", 32), (f"x{i}", 2))) for i in range(3)]
    reqs = [make_req(f"r{i}", PREFIX_A + [i + 3, i + 3], hs[i]) for i in range(3)]
    sched.waiting_queue = [reqs[0], make_req("warmup", [5, 6]), reqs[1], reqs[2]]

    # pass 1: the policy sees the three workflow requests, admits r2, r1; r0 held back
    ctl.before_pass(sched.running_batch)
    assert isinstance(policy.events[0], TaskArrived) and policy.events[0].task_id == 1
    assert [type(e) for e in policy.events[1:]] == [RequestReady] * 3
    assert [r.rid for r in policy.views[0].waiting] == ["r0", "r1", "r2"]
    ctl.reorder(sched.waiting_queue)  # what the calc_priority hook does
    assert [r.rid for r in sched.waiting_queue] == ["warmup", "r2", "r1"]
    ctl.admitted_this_pass = ["warmup", "r2"]  # what the add_one_req hook records
    sched.waiting_queue = [r for r in sched.waiting_queue if r.rid in ("r1",)]  # SGLang drops admitted ones
    ctl.after_pass()
    assert [r.rid for r in sched.waiting_queue] == ["r0", "r1"]  # held request restored in queue order
    assert not ctl.pins  # prefix A not on device yet: the pin waits
    sched.running_batch.reqs = [reqs[2]]

    # pass 2: nothing changed -> the decision is reused, the policy is not called
    ctl.before_pass(sched.running_batch)
    ctl.after_pass()
    assert len(policy.views) == 2  # pass 2 changed the running set -> one new decision
    ctl.before_pass(sched.running_batch)
    ctl.after_pass()
    assert len(policy.views) == 2 and ctl.reused >= 1

    # r2 finishes; its prompt is in the tree now: the next decision pins A
    insert(cache, alloc, list(reqs[2].origin_input_ids))
    reqs[2].output_ids = array("q", [1, 1, 1])
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH

    reqs[2].finished_reason = FINISH_LENGTH(length=3)
    sched.running_batch.reqs = []
    ctl.before_pass(sched.running_batch)
    ctl.after_pass()
    fin = [e for e in policy.events if isinstance(e, RequestFinished)]
    assert len(fin) == 1 and fin[0].request.rid == "r2" and fin[0].output_tokens == 3 and not fin[0].task_done
    assert set(ctl.pins) == {"A"} and cache.protected_size() == 32
    view = policy.views[-1]
    assert view.prefixes["A"].device_tokens == 32 and view.tasks[1].finished_nodes == ("n2",)
    ctl.release_all_pins()
    assert cache.protected_size() == 0

    log.close()
    records = [json.loads(x) for x in (tmp_path / "d.jsonl").read_text().splitlines()]
    decisions = [r for r in records if r["event"] == "decision"]
    assert decisions[0]["admit"] == ["r2", "r1"] and decisions[0]["waiting"] == ["r0", "r1", "r2"]
    assert decisions[0]["not_applied"] == {"pin_not_resident": ["A"]}
    assert [r["rids"] for r in records if r["event"] == "admitted"][0] == ["r2"]
    assert all(r["wall_s"] >= 0 for r in decisions)
