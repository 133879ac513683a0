"""The real SGLang backend (sglang 0.5.23, pinned).

- `plugin`:  entry point loaded by SGLang inside its scheduler process; runs a topas
             policy there through `HookRegistry` hooks.
- `adapter`: translation between SGLang's scheduler state and the policy API, and the
             versioned `topas.workflow/v1` kv_hints action carrying workflow metadata.
- `server`:  start / health-check / stop `sglang.launch_server` as a subprocess.
- `driver`:  asyncio client replaying a `topas.workflow.Trace` against a server.
- `costs`:   the cost model handed to policies inside the server.

Importing this package (or `adapter`, `server`, `driver`) does not import sglang.
CPU install: `make sglang-cpu` (scripts/install_sglang_cpu.sh).
"""
