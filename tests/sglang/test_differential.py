"""Differential tests against sglang 0.5.23 itself (the CPU install, no server): the
project's `fcfs` / `lpm` / `dfs_weight` baselines and the simulator's radix cache
(`topas/engines/sim/radix.py`, matched through `topas/engines/sim/view.py`) versus
sglang's own `SchedulePolicy.calc_priority` (managers/schedule_policy.py) on real `Req`
objects over sglang's real radix caches: the legacy `RadixCache` and the default
`UnifiedRadixCache` with its Rust tree core (and its Python core), filled by real inserts,
emptied by real LRU eviction, with real lock refs.

Each generated scenario (seeded, so the same on every run) warms both caches with the
same operations: inserts of agent prefixes, shared histories and fresh inputs (whole or
cut anywhere: partial inserts), touching matches, locks, and in a share of scenarios LRU
eviction; every insert's matched length, every eviction's freed length and the cache
sizes must agree. Then a waiting queue (5 to 200 requests: around SGLang's 128 limit
too, some prompts fully cached, some retracted with kept output) goes through 1 to 3
scheduling passes: sglang sorts its persistent waiting list; the project's policy gets
the view the simulator builds from its cache; the orders and every request's matched
device / host lengths must be identical. Between passes the heads are admitted (matched
with the length - 1 cap and inserted, as a prefill does), the cache is squeezed, new
requests arrive.

The HiCache host tier is checked on the unified tree's Python core with its host tier
switched on (write-through backups, eviction demotes to the host; see
`differential_worlds.py`, which holds the two worlds: the simulator's cache and sglang's,
driven alike). This file holds the scenarios, the scheduling passes and the tests.

Simplification (the simulator's, not checked here): sglang refreshes the waiting queue's
LRU for cache-agnostic passes every 32nd pass, the simulator at every decision; the
test makes sglang refresh at every pass.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from sglang_support import require_sglang

require_sglang()

from conftest import make_view  # noqa: E402
from differential_worlds import WaitingReq, World, sglang_patches  # noqa: E402
from sglang.srt.managers.schedule_batch import Req  # noqa: E402
from sglang.srt.managers.schedule_policy import SchedulePolicy  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402

from topas.engines.sim.radix import Run, truncate_runs  # noqa: E402
from topas.engines.sim.view import waiting_infos  # noqa: E402
from topas.policy import create_policy  # noqa: E402

pytestmark = pytest.mark.sglang

SGLANG_POLICY = {"fcfs": "fcfs", "lpm": "lpm", "dfs_weight": "dfs-weight"}
CACHES = ("legacy", "unified-rust", "unified-python")
SCENARIOS_PER_CASE = 56  # x 3 policies x 3 caches = 504
HICACHE_SCENARIOS = 20  # x 3 policies = 60


@pytest.fixture(scope="module", autouse=True)
def _sglang_without_server():
    with pytest.MonkeyPatch.context() as mp:
        sglang_patches(mp)
        yield


# ---------------------------------------------------------------------------------------------- scenarios
class Prompts:
    """Agent prefixes, per-agent conversations (shared histories) and fresh inputs."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.n = 0
        self.agents = [(f"agent:{a}", rng.choice([rng.randint(1, 40), rng.randint(20, 160)]))
                       for a in range(rng.randint(1, 8))]
        self.convs = [[[(f"h{a}.{c}.{d}", rng.randint(1, 80)) for d in range(rng.randint(1, 4))]
                       for c in range(rng.randint(1, 3))] for a in range(len(self.agents))]
        self.seen: list[list[Run]] = []  # full prompts inserted so far (fully cached candidates)

    def new(self) -> tuple[list[Run], int]:
        rng = self.rng
        a = rng.randrange(len(self.agents))
        sid, plen = self.agents[a]
        conv = rng.choice(self.convs[a])
        runs: list[Run] = [(sid, 0, plen)] + [(h, 0, n) for h, n in conv[: rng.randint(0, len(conv))]]
        fresh = rng.choice([0, rng.randint(1, 60), rng.randint(1, 200)])
        if fresh:
            self.n += 1
            runs.append((f"in{self.n}", 0, fresh))
        return runs, plen

    def request(self, rid: str) -> WaitingReq:
        rng = self.rng
        if self.seen and rng.random() < 0.2:  # a prompt that is (or was) fully cached
            runs = list(rng.choice(self.seen))
            return WaitingReq(rid, runs, runs[0][2])
        runs, plen = self.new()
        r = WaitingReq(rid, runs, plen)
        if rng.random() < 0.1:  # retracted: its output so far is kept and matched too
            r.generated = [(f"out:{rid}", 0, rng.randint(1, 30))]
        return r


@dataclass(frozen=True)
class Scenario:
    seed: int
    policy: str
    cache: str
    evict: bool
    hicache: bool = False

    def __str__(self) -> str:
        return f"{self.policy}/{self.cache}{'/hicache' if self.hicache else ''}/seed{self.seed}"


def warm_up(w: World, p: Prompts, rng: random.Random, evict: bool) -> None:
    for _ in range(rng.randint(5, 40)):
        x = rng.random()
        if x < 0.55 or not p.seen:
            runs, _ = p.new()
            total = sum(n for _, _, n in runs)
            if rng.random() < 0.4:
                runs = truncate_runs(runs, rng.randint(1, total))  # a partial insert (a chunk, a cut)
            else:
                p.seen.append(runs)
            w.insert(runs, lock=rng.random() < 0.1 and len(w.locks) < 3)
        elif x < 0.7:
            runs = rng.choice(p.seen)
            w.match(truncate_runs(runs, rng.randint(1, sum(n for _, _, n in runs))))
        elif x < 0.8 and w.locks:
            w.unlock(rng.randrange(len(w.locks)))
        elif evict:
            w.evict(rng.randint(1, max(1, w.sim.device_tokens // 2)))


def queue_size(rng: random.Random) -> int:
    x = rng.random()
    if x < 0.55:
        return rng.randint(5, 40)
    if x < 0.7:
        return rng.randint(41, 119)
    if x < 0.9:
        return rng.randint(120, 140)  # around WAITING_QUEUE_PREFIX_MATCH_MAX = 128
    return rng.randint(141, 200)


def sglang_req(w: World, r: WaitingReq) -> Req:
    req = Req(r.rid, "", w.tok.ids(r.prompt), SamplingParams(max_new_tokens=8))
    if r.generated:
        req.output_ids = w.tok.ids(r.generated)
    return req


@dataclass
class Outcome:
    scenarios: int = 0
    passes: int = 0
    identical: int = 0
    tau_sum: float = 0.0
    failures: list[str] = field(default_factory=list)
    # coverage: what the scenarios exercised
    requests: int = 0
    fully_cached: int = 0  # the whole sequence matched on device
    host_hits: int = 0  # a host-tier extension of the device match
    long_queues: int = 0  # passes over more than 128 waiting
    evicted_tokens: int = 0


def kendall_tau(a: tuple[str, ...], b: tuple[str, ...]) -> float:
    if len(a) < 2:
        return 1.0
    pos = {rid: i for i, rid in enumerate(b)}
    seq = [pos[rid] for rid in a]
    n = len(seq)
    disc = sum(1 for i in range(n) for j in range(i + 1, n) if seq[i] > seq[j])
    return 1.0 - 4.0 * disc / (n * (n - 1))


def run_scenario(sc: Scenario, out: Outcome) -> None:
    rng = random.Random(sc.seed)
    out.scenarios += 1
    w = World(sc.cache, sc.hicache)
    try:
        _run(sc, rng, w, out)
    finally:
        out.evicted_tokens += w.evicted


def _run(sc: Scenario, rng: random.Random, w: World, out: Outcome) -> None:
    p = Prompts(rng)
    warm_up(w, p, rng, sc.evict)

    sg_policy = SchedulePolicy(SGLANG_POLICY[sc.policy], w.sg, sc.hicache, False, False)
    ours = create_policy(sc.policy)  # the conf/scheduler defaults are the class defaults (test_stock_defaults)
    n_rid = 0
    entry: list[WaitingReq] = []  # the simulator's waiting list (entry order)
    sg_queue: list[Req] = []  # sglang's waiting queue (persistent, sorted in place)

    def arrive(k: int) -> None:
        nonlocal n_rid
        for _ in range(k):
            n_rid += 1
            r = p.request(f"r{n_rid}")
            if r.generated and rng.random() < 0.7:  # what it computed before the retraction is cached
                fill = r.fill_runs()
                w.insert(truncate_runs(fill, rng.randint(1, sum(n for _, _, n in fill))))
            entry.append(r)
            sg_queue.append(sglang_req(w, r))

    arrive(queue_size(rng))
    previous: tuple[str, ...] = ()
    for _ in range(rng.randint(1, 3)):
        w.log.append(f"pass over {len(entry)} waiting")
        sg_policy._waiting_prefix_refresh_calls = 0  # refresh at every pass, as the simulator does
        sg_policy.calc_priority(sg_queue)
        theirs = tuple(str(r.rid) for r in sg_queue)
        infos = waiting_infos(w.sim, entry, ours, previous, touch=True)
        decision = ours.schedule(make_view(infos))
        mine = decision.admit
        out.passes += 1
        out.requests += len(infos)
        out.fully_cached += sum(i.cached_tokens == i.prompt_tokens + i.generated_tokens for i in infos)
        out.host_hits += sum(i.host_cached_tokens > 0 for i in infos)
        out.long_queues += len(infos) > 128
        out.identical += mine == theirs
        out.tau_sum += kendall_tau(mine, theirs)
        if mine != theirs:
            first = next(i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b)
            out.failures.append(f"{sc}: order differs at {first} of {len(mine)}: ours {mine[first:first + 4]}, "
                                f"sglang {theirs[first:first + 4]}")
        if getattr(ours, "sglang_matches_waiting", lambda n: False)(len(entry)):  # sglang matched them too
            by_rid = {r.rid: r for r in infos}
            for req in sg_queue:
                info = by_rid[req.rid]
                w.check(f"{req.rid} device match", info.cached_tokens, req.prefix_len)
                w.check(f"{req.rid} host match", info.host_cached_tokens, req.host_hit_length)
        w.check_sizes()

        # admit the heads: their prefill matches with the length - 1 cap, then inserts the sequence
        admitted = set(mine[: rng.randint(1, 6)])
        for r in entry:
            if r.rid in admitted:
                fill = r.fill_runs()
                w.match(truncate_runs(fill, sum(n for _, _, n in fill) - 1))
                w.insert(fill)
                p.seen.append(r.prompt)
        entry[:] = [r for r in entry if r.rid not in admitted]
        sg_queue[:] = [r for r in sg_queue if r.rid not in admitted]
        previous = tuple(rid for rid in mine if rid not in admitted)
        if sc.evict:
            w.evict(rng.randint(1, max(1, w.sim.device_tokens // 3)))
        arrive(rng.randint(0, 10))
        if not entry:
            break


def scenarios(policy: str, cache: str, n: int = SCENARIOS_PER_CASE, hicache: bool = False) -> list[Scenario]:
    salt = (sorted(SGLANG_POLICY).index(policy) * 7919 + CACHES.index(cache) * 104729) * 1000 + (500 if hicache else 0)
    return [Scenario(salt + i, policy, cache, evict=i % 2 == 0, hicache=hicache) for i in range(n)]


def check_all(cases: list[Scenario]) -> Outcome:
    out = Outcome()
    for sc in cases:
        try:
            run_scenario(sc, out)
        except AssertionError as e:
            out.failures.append(f"{sc}: {e}")
    assert not out.failures, f"{len(out.failures)} of {len(cases)} scenarios differ from sglang:\n" + "\n".join(
        out.failures[:5])
    return out


# ---------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("cache", CACHES)
@pytest.mark.parametrize("policy", sorted(SGLANG_POLICY))
def test_policy_and_cache_match_sglang(policy: str, cache: str):
    out = check_all(scenarios(policy, cache))
    assert out.scenarios == SCENARIOS_PER_CASE and out.identical == out.passes >= SCENARIOS_PER_CASE
    assert out.fully_cached and out.long_queues and out.evicted_tokens, "the scenarios lost their coverage"


@pytest.mark.parametrize("policy", sorted(SGLANG_POLICY))
def test_hicache_host_hits_match_sglang(policy: str):
    out = check_all(scenarios(policy, "unified-python", n=HICACHE_SCENARIOS, hicache=True))
    assert out.identical == out.passes >= HICACHE_SCENARIOS
    assert out.host_hits and out.evicted_tokens, "the scenarios lost their coverage"


def test_stock_defaults():
    """The configured baselines are SGLang's defaults (schedule_policy.py constants)."""
    import sglang.srt.managers.schedule_policy as sp

    from topas.sweep import compose_config

    lpm = compose_config(["scheduler=lpm"]).scheduler.params
    assert (lpm.fcfs_above_waiting, lpm.in_batch_check_threshold, lpm.in_batch_deprioritize_threshold) == (
        sp.WAITING_QUEUE_PREFIX_MATCH_MAX, sp.IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD,
        sp.IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD)
    p = create_policy("lpm").params
    assert (p.fcfs_above_waiting, p.in_batch_check_threshold, p.in_batch_deprioritize_threshold) == (128, 32, 32)
    assert dict(compose_config(["scheduler=dfs_weight"]).scheduler.params) == {}
