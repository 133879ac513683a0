"""The real SGLang backend (sglang 0.5.23, pinned): an entry-point plugin running topas
policies inside the scheduler, a workflow driver, the server's lifecycle, the `backend=sglang`
runner and a latency profiler (the GPU check, a driver, is topas/fidelity/gpu_check.py).
README.md here lists the modules.

Importing this package (or `adapter`, `hints`, `server`, `driver`) does not import sglang.
CPU install: `make sglang-cpu` (scripts/install_sglang_cpu.sh).
"""
