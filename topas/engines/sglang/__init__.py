"""The real SGLang backend (sglang 0.5.23, pinned), by role:

- `plugin/`: runs inside the server process (entry point `sglang.srt.plugins: topas =
  topas.engines.sglang.plugin.hooks:register`): topas policies in SGLang's scheduler;
- `client/`: starts, drives and stops a server from outside: the server's lifecycle, the
  workflow driver, the `backend=sglang` runner and its records;
- `tools/`: command-line tools (latency profiler, smoke benchmark);
- this folder: what both sides share: `hints` (the `kv_hints` wire protocol), `jsonl` (the
  logs the plugin writes and the client reads), `plugin_env` (the `TOPAS_*` environment the
  client sets and the plugin reads), `costs` (the policy's cost model: loaded in the server,
  checked by the client).

Imports go one way: `tools` -> `client` -> shared <- `plugin`. The GPU check, a driver, is
topas/fidelity/gpu_check.py. README.md here lists the modules.

Importing this package (or `plugin.adapter`, `hints`, `client.server`, `client.driver`) does
not import sglang. CPU install: `make sglang-cpu` (scripts/install_sglang_cpu.sh).
"""
