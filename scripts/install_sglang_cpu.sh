#!/usr/bin/env bash
# Install the real sglang 0.5.23 server into an existing venv, CPU only (no GPU, no CUDA torch).
#
#   scripts/install_sglang_cpu.sh VENV        (make sglang-cpu runs it on .venv)
#
# Recipe (docs/sglang_integration.md, "CPU setup"):
#   1. CPU torch 2.13.0 (on this machine kind the wheel lies in pip's find-links; elsewhere set
#      TOPAS_TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu so pip does not take a CUDA build);
#   2. sglang==0.5.23 and triton==3.9.0 without their dependencies (sglang's own metadata asks
#      for CUDA-only kernels and torch 2.14.1);
#   3. the light packages the server imports, with a constraint pinning torch==2.13.0 so that
#      nothing pulls a CUDA torch;
#   4. the import-time stand-ins (sgl_kernel, torchvision) shipped in
#      topas/engines/sglang/cpu_stubs, put on sys.path of every process of this venv by a .pth
#      file in its site-packages (the server spawns its scheduler; the .pth reaches it);
#   5. the project itself, editable, without deps (so the entry point
#      `sglang.srt.plugins: topas` is registered in this venv).
# Idempotent: a stamp in the venv records the recipe's hash; a second run with the same
# recipe and a working import exits at once. Set TOPAS_SGLANG_FORCE=1 to reinstall.
set -euo pipefail

VENV="${1:-}"
if [[ -z "$VENV" ]]; then
    echo "usage: $0 VENV   (an existing virtual environment, e.g. .venv)" >&2
    exit 2
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$(cd "$VENV" 2>/dev/null && pwd)" || { echo "install_sglang_cpu: no such venv: $1" >&2; exit 2; }
PY="$VENV/bin/python"
if [[ ! -x "$PY" ]]; then
    echo "install_sglang_cpu: $VENV is not a virtual environment (no bin/python)" >&2
    exit 2
fi
# A GPU install (make sglang-gpu: sglang's CUDA torch and the real sglang-kernel) is kept: this CPU
# recipe would replace its torch and remove sgl-kernel. TOPAS_SGLANG_GPU_INSTALLED=1 simulates one
# (tests, machines without CUDA); TOPAS_SGLANG_FORCE=1 installs the CPU recipe over it anyway.
if [[ "${TOPAS_SGLANG_FORCE:-}" != 1 ]] && { [[ "${TOPAS_SGLANG_GPU_INSTALLED:-}" == 1 ]] || \
        "$PY" -c "import importlib.metadata as m, sys; sys.exit(not any(
            next(iter(m.distributions(name=n)), None) for n in ('sglang-kernel', 'sgl-kernel')))" >/dev/null 2>&1; }; then
    echo "install_sglang_cpu: GPU sglang install found in $VENV (sglang-kernel); keeping it, nothing installed"
    exit 0
fi
STUBS="$ROOT/topas/engines/sglang/cpu_stubs"
if [[ ! -f "$STUBS/sgl_kernel/__init__.py" ]]; then
    echo "install_sglang_cpu: stand-ins not found at $STUBS" >&2
    exit 2
fi

SGLANG_VERSION=0.5.23
TORCH_VERSION=2.13.0
TRITON_VERSION=3.9.0
# What sglang 0.5.23's server, scheduler and detokenizer import on the CPU path
# (pins copied from sglang's own metadata where it has one).
LIGHT_PACKAGES=(
    numpy orjson psutil pybase64 requests packaging pillow starlette msgspec pydantic
    "pyzmq>=25.1.2" tqdm ipython aiohttp "transformers==5.19.0" "tokenizers==0.23.2" dill
    "apache-tvm-ffi==0.1.11" "sentencepiece==0.2.1" "compressed-tensors==0.18.0" gguf
    "openai==2.8.0" partial_json_parser setproctitle einops "uvicorn>=0.51" fastapi
    "prometheus-client>=0.20.0" python-multipart interegular nvidia-ml-py zstandard watchfiles
    distro "python-dateutil<3" tiktoken "blobfile==3.0.0" easydict "anthropic>=0.20.0" scipy
    uvloop xxhash jsonschema "xgrammar==0.2.7" "soundfile==0.13.1" regex
)

RECIPE_HASH="$( { cat "${BASH_SOURCE[0]}"; find "$STUBS" -name '*.py' -print0 | sort -z | xargs -0 cat; } | sha256sum | cut -c1-16)"
STAMP="$VENV/.sglang-cpu-stamp"

check() {
    # The import chain the server needs, with the stand-ins, in a fresh interpreter.
    SGLANG_USE_CPU_ENGINE=1 TOPAS_STUBS="$STUBS" "$PY" - <<'PYEOF'
import importlib.metadata as md, os, sys
import torch, sglang, sgl_kernel, torchvision
from sglang.srt.managers.schedule_policy import SchedulePolicy  # noqa: F401
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache  # noqa: F401
from sglang.srt.plugins.hook_registry import HookRegistry  # noqa: F401
assert getattr(sgl_kernel, "TOPAS_CPU_STUB", False), "a real sgl_kernel shadows the stand-in"
stubs = os.path.realpath(os.environ["TOPAS_STUBS"])
for mod in (sgl_kernel, torchvision):
    assert os.path.realpath(mod.__file__).startswith(stubs + os.sep), f"{mod.__name__} from {mod.__file__}, not {stubs}"
assert torch.__version__.split("+")[0] == "2.13.0", torch.__version__
assert md.version("sglang") == "0.5.23", md.version("sglang")
eps = [e.value for e in md.entry_points(group="sglang.srt.plugins") if e.name == "topas"]
assert eps == ["topas.engines.sglang.plugin.hooks:register"], eps
print(f"sglang {md.version('sglang')} / torch {torch.__version__} (cuda={torch.version.cuda}) OK", file=sys.stderr)
PYEOF
}

if [[ -z "${TOPAS_SGLANG_FORCE:-}" && -f "$STAMP" && "$(cat "$STAMP")" == "$RECIPE_HASH" ]] && check 2>/dev/null; then
    echo "install_sglang_cpu: $VENV is up to date (stamp $RECIPE_HASH)"
    exit 0
fi

t0=$SECONDS
CONSTRAINT="$(mktemp)"
trap 'rm -f "$CONSTRAINT"' EXIT
echo "torch==$TORCH_VERSION" >"$CONSTRAINT"
PIP=("$PY" -m pip --disable-pip-version-check)

echo "install_sglang_cpu: [1/5] torch $TORCH_VERSION (CPU)"
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
    TORCH_ARGS=()
    if [[ -n "${TOPAS_TORCH_INDEX_URL:-}" ]]; then
        TORCH_ARGS=(--index-url "$TOPAS_TORCH_INDEX_URL")
    fi
    "${PIP[@]}" install --quiet ${TORCH_ARGS[@]+"${TORCH_ARGS[@]}"} "torch==$TORCH_VERSION"
fi

echo "install_sglang_cpu: [2/5] sglang $SGLANG_VERSION, triton $TRITON_VERSION (--no-deps)"
"${PIP[@]}" install --quiet --no-deps "sglang==$SGLANG_VERSION" "triton==$TRITON_VERSION"

echo "install_sglang_cpu: [3/5] ${#LIGHT_PACKAGES[@]} light packages (constraint torch==$TORCH_VERSION)"
"${PIP[@]}" install --quiet -c "$CONSTRAINT" "${LIGHT_PACKAGES[@]}"

echo "install_sglang_cpu: [4/5] stand-ins via .pth -> $STUBS"
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$STUBS" >"$SITE/topas_sglang_cpu_stubs.pth"
# A torchvision or sgl_kernel installed as a dependency would shadow (or break beside) the stand-ins.
for pkg in torchvision sgl-kernel sglang-kernel; do
    if "${PIP[@]}" show --quiet "$pkg" >/dev/null 2>&1; then
        "${PIP[@]}" uninstall --quiet -y "$pkg"
    fi
done

echo "install_sglang_cpu: [5/5] the project (editable, --no-deps) for the sglang.srt.plugins entry point"
if ! "$PY" -c "import importlib.metadata as md; md.version('topas-harness')" 2>/dev/null; then
    "${PIP[@]}" install --quiet --no-deps -e "$ROOT"
fi

check
echo "$RECIPE_HASH" >"$STAMP"
echo "install_sglang_cpu: done in $((SECONDS - t0)) s; venv size $(du -sh "$VENV" | cut -f1)"
