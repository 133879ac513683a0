"""Small steps: no function over 60 lines and no module over 400 lines outside tests (read with `ast`)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 400


def _sources() -> list[Path]:
    out = [ROOT / "run.py"]
    for pkg in ("topas", "baselines", "analysis", "hydra_plugins", "scripts"):
        out += [p for p in sorted((ROOT / pkg).rglob("*.py")) if "__pycache__" not in p.parts]
    return out


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int, int]]:
    """(name, line, length) of every function or method of `path` longer than `limit` lines (its def line to its
    last line, docstring included)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [(n.name, n.lineno, n.end_lineno - n.lineno + 1) for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > limit]


def test_no_function_over_60_lines_outside_tests():
    bad = [f"{p.relative_to(ROOT)}:{line} {name} ({n} lines)" for p in _sources() for name, line, n in long_functions(p)]
    assert not bad, "split these: " + "; ".join(bad)


def test_no_module_over_400_lines_outside_tests():
    bad = [f"{p.relative_to(ROOT)} ({n} lines)" for p in _sources() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not bad, "split these: " + "; ".join(bad)


def test_the_check_sees_a_long_function_or_method(tmp_path):
    f = tmp_path / "example.py"
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    f.write_text(f"class A:\n    async def long(self):\n{body}\n\n    def short(self):\n        return 1\n")
    assert long_functions(f) == [("long", 2, MAX_FUNCTION_LINES + 1)]
