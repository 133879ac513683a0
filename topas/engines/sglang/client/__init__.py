"""Launching and driving a SGLang server from outside: the server's lifecycle (`server`,
`processes`, `shared_server`, `http_client`), the trace replay (`driver`), the
`backend=sglang` runner (`backend`, `backend_config`, `scaling`) and its records
(`records`). Imports the shared modules one level up, never `plugin` (that code runs in
the server) or `tools`."""
