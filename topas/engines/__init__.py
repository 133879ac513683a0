"""Engines: the discrete-event simulator (default) and real SGLang; iteration-latency predictors."""
