"""Stand-in for `torchvision` on the CPU sglang install (see ../README.md).

The PyPI wheel does not import beside the CPU torch 2.13.0 build. sglang 0.5.23 and
transformers 5.19 import torchvision names at module level (`sglang.srt.configs`
pulls `torchvision.transforms.InterpolationMode`; `transformers.image_utils` pulls
`torchvision.io.decode_image`, ...) but call them only for multimodal models, which
this install does not serve. Every `torchvision.*` submodule therefore imports; the
two enums used as dictionary keys are real; everything else is a placeholder that
raises when called.
"""

from __future__ import annotations

import enum
import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.28.0+topas.cpu.stub"
TOPAS_CPU_STUB = True


class _Placeholder:
    """Any torchvision object: attribute access yields more placeholders, calling raises."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, item: str) -> _Placeholder:
        if item.startswith("__"):
            raise AttributeError(item)
        return _Placeholder(f"{self._name}.{item}")

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(
            f"{self._name}: torchvision is a stand-in on this CPU sglang install "
            "(topas/engines/sglang/cpu_stubs); multimodal models are not supported"
        )

    def __mro_entries__(self, bases):  # allow `class X(torchvision.something)` at import time
        return (object,)

    def __repr__(self) -> str:
        return f"<torchvision stand-in {self._name}>"


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


class ImageReadMode(enum.Enum):
    UNCHANGED = 0
    GRAY = 1
    GRAY_ALPHA = 2
    RGB = 3
    RGB_ALPHA = 4
    RGBA = 4


_REAL = {"InterpolationMode": InterpolationMode, "ImageReadMode": ImageReadMode}


def _module_getattr(modname: str):
    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name in _REAL:
            return _REAL[name]
        full = f"{modname}.{name}"
        if full in sys.modules:
            return sys.modules[full]
        return _Placeholder(full)

    return __getattr__


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = types.ModuleType(spec.name)
        mod.__path__ = []  # a package, so deeper submodules import too
        mod.__getattr__ = _module_getattr(spec.name)
        return mod

    def exec_module(self, module):
        parent, _, child = module.__name__.rpartition(".")
        setattr(sys.modules[parent], child, module)


if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
    sys.meta_path.append(_StubFinder())

__getattr__ = _module_getattr(__name__)
