"""Analysis of run outputs (reads only runs/): one table of all runs, the paper's tables
and figures regenerated from it, and the claims with verdicts (docs/protocol.md)."""
