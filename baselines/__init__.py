"""Baseline scheduling policies, one module per baseline, each registered by name.

Every module names the source it follows (paper section / SGLang file) and any deviation.
Importing this package imports every module in it, so a new `baselines/<name>.py` registers
its policy without an edit here (docs/recipes.md, "Add a scheduler")."""

import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")):
    importlib.import_module(f"{__name__}.{_module}")  # import registers the module's policies
