"""Command-line tools on a SGLang server: `python -m topas.engines.sglang.tools.profiler`
(a latency profile; `profiler_io` is its access to the server) and
`python -m topas.engines.sglang.tools.smoke`. They use `client` to start and drive servers."""
