"""Iteration-latency predictors: aiconfigurator-core (default), roofline (fallback), measured profile."""
