"""Whether the simulator's fidelity (`make fidelity`: analysis/results/fidelity/fidelity.json) was measured on the
code of the day: fidelity.json records the fingerprint of the simulator and policy code it measured
(`fidelity_fingerprint`, read from the sources: no engine or policy is imported) and when; the
report compares it with the current code and says so in claims.md, so a stale fidelity table is never silent."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from topas.fingerprint import POLICY_PACKAGES, RUNNER, code_fingerprint

# what decides the simulator's side of a fidelity comparison: the code a sim run executes (the runner, the sim
# engine, its latency models) with every policy package it compares. Kept here, not in topas/fingerprint.py:
# that module is part of every run's own fingerprint, and this is not.
FIDELITY_PACKAGES = (RUNNER, "topas.engines.sim", "topas.engines.latency", *POLICY_PACKAGES)

FIDELITY_JSON = Path("fidelity") / "fidelity.json"  # under a results folder


def fidelity_fingerprint() -> str:
    """Digest of the simulator and policy code (FIDELITY_PACKAGES and what they import): fidelity.json records it
    when measured and the report compares it with the code of the day."""
    return code_fingerprint(FIDELITY_PACKAGES)


def freshness(recorded: Mapping[str, Any] | None, current: str) -> str:
    """One line: whether the code `recorded` in fidelity.json ({"fingerprint", "measured"}) is `current`."""
    if not recorded or not recorded.get("fingerprint"):
        return "fidelity never measured with a code fingerprint"
    when = recorded.get("measured") or "an unknown date"
    if recorded["fingerprint"] == current:
        return f"fidelity measured on this code ({when})"
    return f"fidelity stale since {when}: the simulator or policy code changed after it was measured"


def status(out: Path, current: str | None = None) -> str | None:
    """The freshness of `out`/fidelity/fidelity.json against the current code; None without the file."""
    path = out / FIDELITY_JSON
    if not path.is_file():
        return None
    try:
        recorded = json.loads(path.read_text()).get("code")
    except (OSError, ValueError, AttributeError):  # unreadable: as good as never measured
        recorded = None
    return freshness(recorded if isinstance(recorded, Mapping) else None, current or fidelity_fingerprint())


CLAIMS_HEADING = "## Simulator fidelity"


def claims_section(line: str) -> str:
    """claims.md's section on the simulator's fidelity."""
    return f"\n{CLAIMS_HEADING}\n\nSimulator fidelity: {line}, see fidelity/fidelity.md\n"
