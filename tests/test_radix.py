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
    c = RadixCache(10_000, host_pool_tokens=1_000)
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
    c = RadixCache(10_000, host_pool_tokens=250)
    c.insert(runs(("A", 200)))
    c.evict(1)
    c.insert(runs(("B", 200)))
    c.evict(1)  # host holds 250: A's copy is dropped for B's
    assert c.match(runs(("A", 200)), touch=False).host_tokens == 0
    assert c.match(runs(("B", 200)), touch=False).host_tokens == 200
    c.check_invariants()


def test_evict_subtree_offloads_an_agent_prefix_but_not_locked_nodes():
    c = RadixCache(10_000, host_pool_tokens=10_000)
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


def test_a_split_refreshes_the_whole_node_upper_half_most_recent():
    # SGLang touches a node before splitting it at a match end: the lower half is just used too
    c = RadixCache(10_000)
    c.insert(runs(("A", 100)))
    c.insert(runs(("B", 100)))
    c.match(runs(("A", 60)))  # splits A at 60: both halves now more recent than B
    assert c.evict(1) == 100 and c.match(runs(("B", 100)), touch=False).device_tokens == 0
    assert c.evict(1) == 40  # then A's lower half (a leaf), its upper half last
    assert c.match(runs(("A", 100)), touch=False).device_tokens == 60
    c.check_invariants()


def test_read_only_match_leaves_the_tree_alone():
    c = RadixCache(10_000)
    c.insert(runs(("A", 100)))
    m = c.match(runs(("A", 60)), touch=False, split=False)
    assert m.device_tokens == 60 and m.device_node.tokens == 100  # the node it ends inside, unsplit
    assert len(c.root.children) == 1 and not c.child_of_root("A").children


def test_children_keep_insertion_order_across_splits():
    c = RadixCache(10_000)
    c.insert(runs(("P", 50), ("x", 10)))
    c.insert(runs(("P", 50), ("y", 10)))
    c.insert(runs(("P", 50), ("x", 5)))  # splits x: the upper half keeps x's slot, before y
    x = c.match(runs(("P", 50), ("x", 5)), touch=False).device_node
    y = c.match(runs(("P", 50), ("y", 10)), touch=False).device_node
    assert c.path_orders(x)[:-1] == c.path_orders(y)[:-1] and c.path_orders(x)[-1] < c.path_orders(y)[-1]
    c.evict_subtree(x, keep_host=False)  # x leaves; a re-inserted x goes after y
    x2, _ = c.insert(runs(("P", 50), ("x", 10)))
    assert c.path_orders(x2)[-1] > c.path_orders(y)[-1]
