"""LaTeX tables that go into a paper unchanged: booktabs rules, numbers right-aligned on the decimal
point (siunitx `S` columns), long text wrapped in `p{}` columns, a caption that states the setup,
the seeds and the CI, a label unique per grid, and a float that fits: `table` when the tabular fits
one column of a two-column page, `table*` when it needs the page width, scaled down to the float's
width where still wider.

The preamble a paper needs: `\\usepackage{booktabs,siunitx,graphicx}` (the first line of every file
says so). tests/test_latex.py compiles every written table in a two-column article where a TeX engine
is installed and checks the structure otherwise.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

HEADER = "% needs \\usepackage{booktabs}, \\usepackage{siunitx} and \\usepackage{graphicx}\n"
# characters of \small text a column / the page of a two-column article holds (tests/test_latex.py compiles
# them there); a tabular wider than its float is scaled down to it
COLUMN_CHARS = 44
WRAP_CHARS = 34  # a longer text cell wraps in a p{} column of this width
SEP_CHARS = 3  # the space between two columns (2 \tabcolsep)


# text -> LaTeX, one pass (a replacement is never replaced again); >= and <= before > and <
_ESCAPES = {"\\": "\\textbackslash{}", "&": "\\&", "%": "\\%", "$": "\\$", "#": "\\#", "_": "\\_", "{": "\\{",
            "}": "\\}", "~": "\\textasciitilde{}", "^": "\\textasciicircum{}", ">=": "$\\geq$", "<=": "$\\leq$",
            ">": "\\textgreater{}", "<": "\\textless{}", "≥": "$\\geq$", "≤": "$\\leq$", "±": "$\\pm$",
            "×": "$\\times$", "▼": "$\\downarrow$", "▲": "$\\uparrow$", "†": "\\dag{}"}
_ESCAPE_RE = re.compile("|".join(re.escape(k) for k in sorted(_ESCAPES, key=len, reverse=True)))


def _escape(text: str) -> str:
    """Plain text -> LaTeX text: the special characters, and the glyphs that would print wrong (>=, ±)."""
    return _ESCAPE_RE.sub(lambda m: _ESCAPES[m.group(0)], str(text))


def label(grid: str, name: str) -> str:
    """A table's label: unique per grid (`tab:full:main_jct`), so two grids' tables go in one paper."""
    return f"tab:{grid}:{name}".replace("_", "-")


def _number(x: Any, digits: int, signed: bool) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "{--}"  # text in an S column: braced
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def _s_format(values: list[str]) -> str:
    """siunitx `table-format` of a column's printed numbers: sign, integer and decimal digits."""
    nums = [v for v in values if not v.startswith("{")]
    if not nums:
        return "S"
    whole = max(len(v.lstrip("+-").split(".")[0]) for v in nums)
    dec = max((len(v.split(".")[1]) if "." in v else 0) for v in nums)
    sign = "+" if any(v[0] in "+-" for v in nums) else ""
    spec = f"table-format={sign}{whole}.{dec}" if dec else f"table-format={sign}{whole}"
    return f"S[{spec}, retain-explicit-plus]" if sign else f"S[{spec}]"


def _head(col: Any) -> tuple[str, ...]:
    return col if isinstance(col, tuple) else (col,)


def render(df: pd.DataFrame, caption: str, tag: str, digits: Mapping[Any, int] | None = None,
           signed: Iterable[Any] = (), right: Iterable[Any] = ()) -> str:
    """`df` as a floating table. Numeric columns are those in `digits` (column -> decimals; `signed`:
    always print the sign); every other column is text (escaped; wrapped when long; right-aligned when
    in `right`: numbers already formatted with their units). Column labels may be tuples (a two-level
    header: the first level spans its columns)."""
    digits, signed, right = dict(digits or {}), set(signed), set(right)
    cells, fmt, widths = {}, [], []
    for col in df.columns:
        if col in digits:
            cells[col] = [_number(x, digits[col], col in signed) for x in df[col]]
            fmt.append(_s_format(cells[col]))
            width = max([len(v) for v in cells[col]] + [0])
        else:
            raw = ["" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v) for v in df[col]]
            cells[col] = [_escape(v) for v in raw]
            width = max([len(v) for v in raw] + [0])
            fmt.append(f"p{{{WRAP_CHARS / 2:g}em}}" if width > WRAP_CHARS else "r" if col in right else "l")
            width = min(width, WRAP_CHARS)
        widths.append(max(width, len(_head(col)[-1])) + SEP_CHARS)
    total = sum(widths)
    levels = max(len(_head(c)) for c in df.columns)
    lines = [f"\\begin{{tabular}}{{{''.join(fmt)}}}", "\\toprule"]
    if levels == 2:  # the first level spans its columns, with a rule under it
        spans, rules, i = [], [], 0
        for top, group in _groups([_head(c)[0] if len(_head(c)) == 2 else "" for c in df.columns]):
            spans.append(f"\\multicolumn{{{group}}}{{c}}{{{_escape(top)}}}" if top and group > 1 else
                         (f"{{{_escape(top)}}}" if top else ""))
            if top:
                rules.append(f"\\cmidrule(lr){{{i + 1}-{i + group}}}")
            i += group
        lines += [" & ".join(spans) + " \\\\", " ".join(rules)]
    lines.append(" & ".join(f"{{{_escape(_head(c)[-1])}}}" for c in df.columns) + " \\\\")
    lines.append("\\midrule")
    lines += [" & ".join(cells[c][i] for c in df.columns) + " \\\\" for i in range(len(df))]
    lines += ["\\bottomrule", "\\end{tabular}"]
    env, width = ("table", "\\columnwidth") if total <= COLUMN_CHARS else ("table*", "\\textwidth")
    # shrunk to the float's width only where wider (graphicx: \width is the tabular's natural width)
    body = f"\\resizebox{{\\ifdim\\width>{width}{width}\\else\\width\\fi}}{{!}}{{%\n" + "\n".join(lines) + "}"
    return (f"{HEADER}\\begin{{{env}}}[htbp]\n\\centering\n\\small\n{body}\n"
            f"\\caption{{{_escape(caption)}}}\n\\label{{{tag}}}\n\\end{{{env}}}\n")


def _groups(keys: list[str]) -> list[tuple[str, int]]:
    """Runs of equal keys: [(key, length), ...]."""
    out: list[tuple[str, int]] = []
    for k in keys:
        if out and out[-1][0] == k and k:
            out[-1] = (k, out[-1][1] + 1)
        else:
            out.append((k, 1))
    return out
