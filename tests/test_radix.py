"""The simulated radix cache: token-exact matching over segment runs, LRU, locks, host tier."""

from topas.engines.sim.radix import RadixCache, truncate_runs


def runs(*segs):
    return [(s, 0, n) for s, n in segs]


def test_match_is_token_exact_across_partial_segments():
    c = RadixCache(10_000)
    c.insert(runs(("P", 100), ("x", 50)))
    # same prefix, different continuation: shares exactly the 100 prefix tokens
    m = c.match(runs(("P", 100), ("y", 30)))
    assert (m.device_tokens, m.host_tokens) == (100, 0)
    # a finished call cached all but its last output token: the next turn reuses it minus one token
    c.insert(truncate_runs(runs(("P", 100), ("x", 50), ("out", 20)), 169))
    m = c.match(runs(("P", 100), ("x", 50), ("out", 20), ("in2", 10)))
    assert m.device_tokens == 169
    c.check_invariants()


def test_insert_counts_only_new_tokens():
    c = RadixCache(10_000)
    _, added = c.insert(runs(("P", 100), ("x", 50)))
    assert added == 150
    _, added = c.insert(runs(("P", 100), ("y", 30)))
    assert added == 30
    assert c.device_tokens == 180 and c.evictable_tokens == 180
    c.check_invariants()


def test_lru_evicts_least_recently_used_unlocked_leaf():
    c = RadixCache(10_000)
    c.insert(runs(("A", 100)))
    c.insert(runs(("B", 100)))
    c.insert(runs(("C", 100)))
    c.match(runs(("A", 100)))  # A is now the most recent
    freed = c.evict(1)
    assert freed == 100
    assert c.match(runs(("B", 100)), touch=False).device_tokens == 0  # B was the LRU
    assert c.match(runs(("A", 100)), touch=False).device_tokens == 100
    c.check_invariants()


def test_locked_prefix_is_never_evicted():
    c = RadixCache(10_000)
    node, _ = c.insert(runs(("A", 100)))
    c.insert(runs(("B", 100)))
    c.lock(node)
    assert c.evictable_tokens == 100
    freed = c.evict(10_000)
    assert freed == 100
    assert c.match(runs(("A", 100)), touch=False).device_tokens == 100
    c.unlock(node)
    assert c.evict(10_000) == 100
    c.check_invariants()


def test_parent_evicted_only_after_its_children():
    c = RadixCache(10_000)
    c.insert(runs(("P", 100), ("x", 10)))
    c.insert(runs(("P", 100), ("y", 10)))
    assert c.evict(1) == 10  # a leaf first, never the shared prefix
    assert c.match(runs(("P", 100)), touch=False).device_tokens == 100
    c.check_invariants()


def test_host_tier_keeps_evicted_prefix_and_loads_it_back():
    c = RadixCache(10_000, host_capacity=1_000)
    c.insert(runs(("P", 300), ("x", 10)))
    c.evict(10_000)
    assert c.device_tokens == 0 and c.host_tokens == 310
    m = c.match(runs(("P", 300), ("z", 5)))
    assert (m.device_tokens, m.host_tokens) == (0, 300)
    assert c.load_back(m.host_node) == 300
    assert c.match(runs(("P", 300)), touch=False).device_tokens == 300
    assert c.bytes_in_tokens == 300 and c.bytes_out_tokens == 310
    c.check_invariants()


def test_host_tier_full_drops_lru_host_copies():
    c = RadixCache(10_000, host_capacity=250)
    c.insert(runs(("A", 200)))
    c.evict(1)
    c.insert(runs(("B", 200)))
    c.evict(1)  # host holds 250: A's copy is dropped for B's
    assert c.match(runs(("A", 200)), touch=False).host_tokens == 0
    assert c.match(runs(("B", 200)), touch=False).host_tokens == 200
    c.check_invariants()


def test_evict_subtree_offloads_an_agent_prefix_but_not_locked_nodes():
    c = RadixCache(10_000, host_capacity=10_000)
    c.insert(runs(("P", 100), ("x", 10)))
    node, _ = c.insert(runs(("P", 100), ("y", 10)))
    top = c.match(runs(("P", 100)), touch=False).device_node
    c.lock(node)
    c.evict_subtree(top, keep_host=True)
    assert c.device_tokens == 110  # the locked branch and its ancestor stay
    c.unlock(node)
    c.evict_subtree(top, keep_host=False)
    assert c.device_tokens == 0 and c.host_tokens == 0
    c.check_invariants()
