"""Discrete-event simulator of an SGLang server (the embedded default engine)."""
