"""Simulator fidelity: the real SGLang server and the simulator configured like it, on identical
traces. `python -m topas.fidelity` (`make fidelity`); validate.py runs it, metrics.py compares
per cell, differences.py compares the differences between schedulers, calibrate.py scales the
latency profile to a run's machine speed, report.py writes the tables and figure
(analysis/results/fidelity/); gpu_check.py is the short real-vs-simulated check for a GPU
machine (`scripts/gpu_check.sh`)."""
