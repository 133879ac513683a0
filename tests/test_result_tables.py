"""Both engines' run tables have exactly the columns topas/results.py declares (names, order,
dtypes): the simulator on a small run, the real engine's record builder on hand-made driver
results and plugin logs (no sglang needed)."""

from __future__ import annotations

import pytest
from conftest import chain_workflow, check_run, make_trace, run_sim
from helpers.sglang_logs import fake_logs

from topas.engines.sglang.client.records import sglang_record
from topas.results import REQUESTS, TASKS, TIMELINE, Table, task_table

TABLES: tuple[tuple[str, Table], ...] = (("tasks", TASKS), ("requests", REQUESTS), ("timeline", TIMELINE))


def test_the_simulator_tables_have_exactly_the_declared_columns():
    tr = make_trace([chain_workflow() for _ in range(6)], [0, 0.5, 1, 2, 3, 4])
    rec = check_run(run_sim(tr, "lpm", kv_pool_tokens=4000))  # a small pool: retractions, host-tier traffic
    for name, table in TABLES:
        # the simulator observes everything: no NaN, so no int64 column as float64
        assert table.mismatches(getattr(rec, name), nan_for_unobserved=False) == [], name


def test_the_real_engine_record_builder_has_exactly_the_declared_columns():
    tr, calls, decisions, iterations = fake_logs()
    rec = sglang_record(tr, calls, 1000.0, 0.5, decisions, iterations)
    for name, table in TABLES:
        assert table.mismatches(getattr(rec, name)) == [], name
    assert rec.timeline["host_tokens"].isna().all()  # no host tier: NaN, the column still there


def test_every_column_is_declared_once_with_a_dtype_and_a_meaning():
    for _, table in TABLES:
        assert len(set(table.names)) == len(table.names)
        assert all(c.dtype in ("int64", "float64", "str", "bool") and c.meaning for c in table.columns)


def test_a_row_with_a_missing_or_an_unknown_column_is_refused():
    row = {"task_id": 0, "template": "w", "arrival": 0.0, "finish": 1.0, "jct": 1.0, "num_calls": 2}
    assert task_table([row], 0.0).columns.tolist() == TASKS.names
    with pytest.raises(ValueError, match=r"missing \['jct'\], unknown \[\]"):
        task_table([{k: v for k, v in row.items() if k != "jct"}], 0.0)
    with pytest.raises(ValueError, match=r"missing \[\], unknown \['extra'\]"):
        task_table([{**row, "extra": 1}], 0.0)
