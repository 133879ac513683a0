"""JSONL files of the SGLang backend: the plugin appends (decision and iteration logs),
the backend reads them back after a run (`read_jsonl`)."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _json_default(o: Any) -> Any:
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    return str(o)


class JsonlWriter:
    """Append-only JSONL file, one record per line, line-buffered (a reader sees whole
    lines while the server runs), thread-safe. `path=None`: writes nothing."""

    def __init__(self, path: str | None) -> None:
        self._f = open(path, "a", encoding="utf-8", buffering=1) if path else None
        self._lock = threading.Lock()

    def write_record(self, record: Mapping[str, Any]) -> None:
        if self._f is None:
            return
        line = json.dumps(record, separators=(",", ":"), default=_json_default)
        with self._lock:
            self._f.write(line + "\n")

    def write(self, **record: Any) -> None:
        self.write_record(record)

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


DecisionLog = JsonlWriter  # the plugin's decision log (events: start, decision, admitted, ...; see plugin/controller.py)


def read_jsonl(path: str | Path | None) -> list[dict[str, Any]]:
    """Records of a JSONL file (missing file: none; a torn last line is skipped)."""
    if path is None or not Path(path).exists():
        return []
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
