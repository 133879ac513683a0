"""The fidelity report: Markdown tables (printed and saved), the full numbers as JSON, and
a figure of simulated vs real JCT per task (scatter with the y = x line).

First the differences between schedulers (differences.py; analysis.display renders them): per
(workload, policy), the paired change of mean JCT vs FCFS and vs the best baseline on the real
server with its 95% CI over the repeats, on the simulator (scaled and on the profile), whether
the simulator's change lies inside the real CI and has its sign, and the repeats a 10%
difference would need at the noise observed. The verdicts of the harness rest on such differences.

Columns of the main (per-cell error) table, per (workload, policy): real mean JCT (mean over the repeats)
and run-to-run noise of the real server (max - min) / mean over the repeats; the
simulator's relative error (sim - real) / real on the profile as measured ("profile") and
on the profile scaled to each run's machine speed ("scaled", calibrate.py); the same for
p99 JCT; the scaled errors of mean TTFT, mean request latency, cached tokens and mean
decode batch size; retractions real / sim; the machine speed factor during the runs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from analysis.fidelity_status import freshness
from topas.fidelity.metrics import METRICS

GOAL = {"jct_mean": 0.10, "jct_p99": 0.20}


def _pct(x: float | None, signed: bool = True) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:+.1%}" if signed else f"{x:.1%}"


def _mark(err: float | None, key: str) -> str:
    """The error, bold when it misses the goal."""
    txt = _pct(err)
    if key in GOAL and err is not None and not math.isnan(err) and abs(err) > GOAL[key]:
        return f"**{txt}**"
    return txt


def main_table(result: Mapping[str, Any]) -> str:
    head = ("| workload | policy | JCT mean real (s) | noise | err profile | err scaled | JCT p99 real (s) | noise | "
            "err profile | err scaled | TTFT mean err | req. latency mean err | cached tokens err | "
            "retractions real / sim | batch size err | machine speed |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for c in result["cells"]:
        m = c["metrics"]
        f = [x["decode"] for x in c.get("speed_factors", [])]
        speed = f"x{min(f):.2f}-{max(f):.2f}" if f else "n/a"
        lines.append(
            f"| {c['workload']} | {c['scheduler']} | {m['jct_mean']['real']:.3f} | {_pct(m['jct_mean']['noise'], False)} | "
            f"{_mark(m['jct_mean']['err'], 'jct_mean')} | {_mark(m['jct_mean'].get('err_scaled'), 'jct_mean')} | "
            f"{m['jct_p99']['real']:.3f} | {_pct(m['jct_p99']['noise'], False)} | {_mark(m['jct_p99']['err'], 'jct_p99')} | "
            f"{_mark(m['jct_p99'].get('err_scaled'), 'jct_p99')} | {_pct(m['ttft_mean'].get('err_scaled'))} | "
            f"{_pct(m['e2e_mean'].get('err_scaled'))} | {_pct(m['cached_tokens'].get('err_scaled'))} | "
            f"{m['retractions']['real']:.1f} / {m['retractions'].get('sim_scaled', m['retractions']['sim']):.1f} | "
            f"{_pct(m['mean_batch_size'].get('err_scaled'))} | {speed} |"
        )
    return "\n".join(lines)


ERR_NOTE = ("Errors are (sim - real) / real; **bold** misses the goal (mean JCT 10%, p99 JCT 20%). *noise*: "
            "run-to-run variation of the real server over the repeats, (max - min) / mean. *err profile*: the "
            "simulator on the latency profile as measured; *err scaled*: on the profile scaled to the machine speed "
            "measured in each real run (mean of the paired errors; topas/fidelity/calibrate.py). *machine speed*: "
            "that scale for decode steps.")
DIFF_NOTE = ("The harness's verdicts rest on differences between schedulers, so this is the comparison that "
             "matters: per workload and policy, the paired change of mean JCT (X - B) / B against FCFS and against "
             "the best baseline (lowest real mean JCT, TOPAS and its ablations excluded), repeat k of each paired "
             "with repeat k of the other (same trace). *real change*: its mean over the repeats and 95% Student-t "
             "half-width (pp: percentage points); *sim change (scaled)*: the same paired change on the simulator at "
             "each real run's machine speed; *sim change (profile)*: on the profile as measured. *inside CI*: the "
             "scaled simulator's change lies within the real CI; *same sign*: it points the same way as the real "
             "mean. A wide CI means the real server cannot tell the two apart at these repeats; *repeats (needed)*: "
             "the repeats used and those a 10% difference would need at this row's noise.")


def differences_table(result: Mapping[str, Any]) -> str:
    """The "Differences between schedulers" table (topas/fidelity/differences.py), config names as the main table."""
    from analysis.display import fidelity_differences_display, to_markdown

    if "differences" not in result:
        return "Not in this result: it was measured before fidelity.json recorded the differences."
    tab = fidelity_differences_display(result, readable=False)
    return to_markdown(tab) if len(tab) else "None: no workload ran two schedulers to compare."


def repeats_line(result: Mapping[str, Any], effect: float = 0.10) -> str:
    """How many repeats a difference of `effect` needs to exclude 0, at the median and largest noise observed."""
    from topas.fidelity.differences import noise, repeats_needed

    med, worst = noise(d.get("sd") for d in result.get("differences", []))
    if math.isnan(med):
        return f"Repeats needed for a {effect:.0%} difference: unknown (no pair of schedulers with two repeats)."
    return (f"Repeats needed for a {effect:.0%} difference between two schedulers to have a 95% CI that excludes 0: "
            f"{repeats_needed(med, effect)} at the median noise observed (sd of the paired changes {med:.1%}), "
            f"{repeats_needed(worst, effect)} at the largest ({worst:.1%}); this measurement has "
            f"{result['settings'].get('repeats')}.")


def detail_table(cell: Mapping[str, Any]) -> str:
    lines = ["| metric | real | noise | sim (profile) | err | sim (scaled) | err |", "|---|---|---|---|---|---|---|"]
    for key, label, _ in METRICS:
        r = cell["metrics"][key]
        lines.append(f"| {label} | {r['real']:.4g} | {_pct(r['noise'], False)} | {r['sim']:.4g} | {_pct(r['err'])} | "
                     f"{r.get('sim_scaled', math.nan):.4g} | {_pct(r.get('err_scaled'))} |")
    return "\n".join(lines)


def settings_text(result: Mapping[str, Any]) -> str:
    st = result["settings"]
    srv = st.get("server", {})
    trip = st.get("request_latency_s") or {}
    cells = result["cells"]
    wl = sorted({(c["workload"], c["token_scale"], c["num_tasks"], c["arrival_rate"]) for c in cells})
    profiled = st.get("profiled_server", {}).get("kv_pool_tokens")
    other_pool = (f" (the profile's server had a KV pool of {profiled} tokens)"
                  if profiled is not None and profiled != srv.get("kv_pool_tokens") else "")
    measured = "given, not measured by this run" if st.get("profile_given") else f"measured in {st.get('profile_s')} s"
    return "\n".join([
        f"- real server: SGLang {srv.get('sglang_version')} on {st.get('device')} ({st.get('model')}), KV pool "
        f"{srv.get('kv_pool_tokens')} tokens, chunked prefill {srv.get('chunked_prefill_size')}, max prefill tokens "
        f"{srv.get('max_prefill_tokens')}, max running requests {srv.get('max_running_requests')}; one server for all "
        f"real runs, {st.get('repeats')} repeat(s) per cell (repeat-major, the scheduler order rotated per repeat, "
        "after one warm-up run that is not recorded)",
        "- workloads: " + "; ".join(f"{w} (token scale {s:g}, {n} tasks, {r:g} tasks/s, seed {st.get('seed')})"
                                    for w, s, n, r in wl),
        f"- profile: `{st.get('profile')}` ({measured}){other_pool}; client path: submit "
        f"{1e3 * (trip.get('submit') or 0):.2f} ms + {1e6 * (trip.get('submit_per_token') or 0):.2f} us/token, return "
        f"{1e3 * (trip.get('return') or 0):.2f} ms, dispatch {1e3 * (trip.get('dispatch') or 0):.2f} ms + "
        f"{1e6 * (trip.get('dispatch_per_token') or 0):.2f} us/token; "
        f"batched prefill shares {1e3 * (st.get('prefill_batch_shared_s') or 0):.2f} ms per extra request",
        f"- total wall time {st.get('total_s')} s",
    ])


def jct_figure(result: Mapping[str, Any], path: Path) -> Path | None:
    """The sim-vs-real JCT scatter, drawn in the analysis figures' style (analysis/figures_fidelity.py)."""
    from analysis.figures_fidelity import save_fidelity_jct

    return save_fidelity_jct(result, path)


def code_now() -> str:
    """The simulator and policy code on disk now (analysis.fidelity_status.fidelity_fingerprint), not as this process
    first read it: a measurement takes minutes."""
    from analysis.fidelity_status import fidelity_fingerprint
    from topas.fingerprint import clear_caches

    clear_caches()
    return fidelity_fingerprint()


def code_line(result: Mapping[str, Any], current: str) -> str:
    """fidelity.md's line on the code measured, as of writing (`make report` says it again in claims.md, against
    the code of its day): its freshness and fingerprint."""
    code = result.get("code") or {}
    tail = f"; simulator and policy code `{code['fingerprint']}`" if code.get("fingerprint") else ""
    return f"**Code** (when this file was written): {freshness(code, current)}{tail}."


def write_report(result: Mapping[str, Any], out: Path) -> dict[str, Path]:
    """fidelity.md, fidelity.json, fidelity_jct.png under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    fig = jct_figure(result, out / "fidelity_jct.png")
    md = ["# Simulator fidelity: the real SGLang server vs the simulator on identical traces", "",
          "Generated by `python -m topas.fidelity` (`make fidelity`).", "", code_line(result, code_now()), "",
          "## Differences between schedulers", "", DIFF_NOTE, "", differences_table(result), "",
          repeats_line(result), "", "## Per-cell errors", "", ERR_NOTE, "", main_table(result), "",
          "## Setup", "", settings_text(result), ""]
    if fig is not None:
        md += [f"![JCT per task, simulator vs real]({fig.name})", ""]
    md += ["## Every metric, per cell", ""]
    for c in result["cells"]:
        md += [f"### {c['workload']} / {c['scheduler']}", "", detail_table(c), ""]
    (out / "fidelity.md").write_text("\n".join(md))
    (out / "fidelity.json").write_text(json.dumps(result, indent=1, default=float) + "\n")
    return {"md": out / "fidelity.md", "json": out / "fidelity.json", "figure": fig}
