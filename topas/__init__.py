"""TOPAS reproduction harness: workflow model, policy API, TOPAS, engines, workloads, results."""

__version__ = "0.1.0"
