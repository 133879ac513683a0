"""HTTP to a SGLang server, on httpx: pooled keep-alive clients (async for the driver's
replay, sync for the launcher and the tools, one library for both) and errors as one line."""

from __future__ import annotations

import httpx

# Every request goes straight to the server it names: a proxy from the environment
# (HTTP_PROXY without a NO_PROXY entry) would otherwise intercept 127.0.0.1.
_TRUST_ENV = False


class ServerRequestError(OSError):
    """A request to the server failed: an HTTP error status, or no answer (connection refused
    or dropped, timeout). One line. An OSError, as urllib's errors were, so callers catching
    OSError around server requests see it."""


def sync_client(timeout_s: float, max_connections: int | None = None) -> httpx.Client:
    """A pooled client; thread-safe, so a thread pool may share it. `timeout_s` bounds each
    connect / read / write and the wait for a pooled connection (not the whole request)."""
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections or 64)
    return httpx.Client(timeout=httpx.Timeout(timeout_s), limits=limits, trust_env=_TRUST_ENV)


def async_client(timeout_s: float, max_connections: int) -> httpx.AsyncClient:
    """A pooled asyncio client holding up to `max_connections` keep-alive connections."""
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), limits=limits, trust_env=_TRUST_ENV)


def request(client: httpx.Client, base_url: str, method: str, path: str, body: bytes | None,
            timeout: float) -> httpx.Response:
    """The answer, read in full; `ServerRequestError` (one line) on an error status or none."""
    try:
        r = client.request(method, f"{base_url}{path}", content=body, timeout=timeout,
                           headers={"Content-Type": "application/json"})
    except (httpx.HTTPError, OSError) as e:
        raise ServerRequestError(f"{method} {path}: {error_line(e)}") from None
    if r.status_code >= 400:
        raise ServerRequestError(f"{method} {path}: {status_line(r.status_code, r.content)}")
    return r


def status_line(status: int, body: bytes) -> str:
    """`HTTP 400: <first 300 bytes of the body>` (`HTTP 400` for an empty body), on one line."""
    text = one_line(body[:300].decode("utf-8", "replace"))
    return f"HTTP {status}: {text}" if text else f"HTTP {status}"


def error_line(e: BaseException) -> str:
    """`ConnectError: [Errno 111] Connection refused`, on one line: the class says what failed
    when httpx's message is empty (some timeouts), the root cause what httpx's message hides
    (the async client's `All connection attempts failed`)."""
    root = e
    while (root.__cause__ or root.__context__) is not None:
        root = root.__cause__ or root.__context__
    text = f"{type(e).__name__}: {e}"
    if root is not e and str(root) and str(root) != str(e):
        text += f" ({type(root).__name__}: {root})"
    return one_line(text)


def one_line(text: str) -> str:
    return " ".join(str(text).split())
