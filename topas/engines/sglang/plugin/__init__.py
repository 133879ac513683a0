"""Code that runs inside the SGLang server process: the entry-point plugin (`hooks.register`,
entry point `sglang.srt.plugins: topas`), its controller, the translation to and from SGLang's
state (`adapter`, `cache_probe`, `pins`) and the per-iteration log. Imports only the shared
modules one level up (`hints`, `jsonl`, `plugin_env`, `costs`), never `client` or `tools`:
SGLang loads it in every server process."""
