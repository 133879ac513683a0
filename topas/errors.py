"""One-line error messages from Hydra / OmegaConf / the OS / our own exceptions."""

from __future__ import annotations

import errno
import re
import shutil
from pathlib import Path

_NOISE = ("full_key", "object_type", "provider=", "Config search path", "Set the environment variable", "See https://")
# a write that failed for lack of room: errno -> what to say (text matched when an error carries no errno, e.g. pyarrow's)
_FULL = {errno.ENOSPC: ("No space left", "no space left on the device"),
         errno.EDQUOT: ("quota exceeded", "disk quota exceeded"),
         errno.EFBIG: ("File too large", "file too large (a file-size limit, e.g. ulimit -f)")}
GRAMMAR = re.compile(r"(LexerNoViableAltException|mismatched input|extraneous input|no viable alternative|token recognition)")


def _existing(p: Path) -> Path:
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def disk_full(e: BaseException, path: str | Path | None = None) -> str | None:
    """One line for a write that failed for lack of room, naming the file (its own, else `path`) and the
    free space left there; None for any other error."""
    code = getattr(e, "errno", None)
    if code not in _FULL:
        code = next((c for c, (words, _) in _FULL.items() if words.lower() in str(e).lower()), None)
    if code is None:
        return None
    where = Path(getattr(e, "filename", None) or path or ".")
    try:
        free = f"{shutil.disk_usage(_existing(where.absolute())).free / 2**20:,.0f} MiB free there"
    except OSError:
        free = "free space unknown"
    return f"cannot write {where}: {_FULL[code][1]}; {free}"


def unreadable_override(override: str) -> str:
    """One line for an override Hydra's grammar cannot read, with the quoting that fixes it."""
    key, _, value = override.partition("=")
    hint = f"quote the value: '{key}=\"{value}\"'" if value else "quote it"
    return (f"override '{override}': Hydra's override grammar cannot read it (an unquoted '~', '=', space or "
            f"non-ASCII character); {hint}")


def _override_syntax(lines: list[str]) -> str | None:
    """Hydra's lexer error naming the override it cannot read."""
    if not lines[0].startswith("LexerNoViableAltException:"):
        return None
    return unreadable_override(lines[0].split(":", 1)[1].strip())


def one_line(e: BaseException, path: str | Path | None = None) -> str:
    """Hydra/OmegaConf errors span several lines; keep the informative ones on one. An OS error names its
    file (else `path`); a full disk also the free space."""
    if isinstance(e, OSError) or "Errno" in str(e):
        full = disk_full(e, path)
        if full:
            return full
        if isinstance(e, OSError) and (e.filename or path) and e.strerror:
            return f"{e.filename or path}: {e.strerror}"
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip() and not ln.strip().startswith(_NOISE)]
    if not lines:
        return type(e).__name__
    syntax = _override_syntax(lines)
    if syntax:
        return syntax
    if any(ln.startswith("Available options") for ln in lines):
        i = next(i for i, ln in enumerate(lines) if ln.startswith("Available options"))
        return f"{' '.join(lines[:i])}; available: {', '.join(lines[i + 1:])}"
    return "; ".join(lines)
