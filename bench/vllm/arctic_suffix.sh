#!/usr/bin/env bash
# Suffix decoding for vLLM 0.26 on the GPU machine (issue 15): vLLM's `method: "suffix"` imports
# `arctic_inference.suffix_decoding` (PyPI arctic-inference), whose only binary wheel on PyPI is 0.0.4 (no suffix
# decoding); 0.3.0 (the release built for vLLM 0.26.0) is an sdist whose setup.py needs torch and grpc tools to run.
# Its suffix tree is plain C++ (nanobind, no torch, no CUDA), so this builds just that part for the device's
# Python 3.12 and lays it out as a package under .whl/site/ (device.sh puts .whl/site on the path there):
#   arctic_inference/__init__.py, arctic_inference/suffix_decoding/{__init__,cache}.py, _C.cpython-312-*.so
# No dist-info, so vLLM finds no "arctic_inference" plugin entry point (the plugin only patches vLLM when
# ARCTIC_INFERENCE_ENABLED is set anyway). libstdc++ is linked statically: the device image's may be older.
# Usage (from the project root): bash bench/vllm/arctic_suffix.sh [python3.12]   (about a minute; needs cmake, g++)
set -euo pipefail
PY=${1:-}
if [ -z "$PY" ]; then    # the first Python 3.12 that runs (a pyenv shim may exist without being usable)
  for c in python3.12 /root/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12; do
    if "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then PY=$c; break; fi
  done
fi
[ -n "$PY" ] || { echo "arctic_suffix.sh: no Python 3.12 here (the device runs 3.12); give one as the argument" >&2; exit 1; }
VERSION=0.3.0
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
"$PY" -m venv "$W/py"
"$W/py/bin/pip" install -q --disable-pip-version-check nanobind==2.9.2 numpy
# the sdist as published: pip prepares its metadata by running setup.py, which imports torch, so download it with
# the project's environment (.venv has torch); the sdist itself is the same for every Python
"${DL_PY:-.venv/bin/python}" -m pip download -q --disable-pip-version-check --no-deps --no-binary=:all: \
  --no-build-isolation -d "$W" "arctic-inference==$VERSION" 2>&1 | grep -v "^WARNING: Location" || true
SDIST=$(ls "$W"/arctic_inference-"$VERSION".tar.gz)
tar -xzf "$SDIST" -C "$W"
SRC=$W/arctic_inference-$VERSION
cmake -S "$SRC/csrc/suffix_decoding" -B "$W/build" -DPython_EXECUTABLE="$W/py/bin/python" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_MODULE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$W/lib" >/dev/null
cmake --build "$W/build" -j"$(nproc)" >/dev/null
OUT=.whl/site/arctic_inference
rm -rf "$OUT" && mkdir -p "$OUT/suffix_decoding"
cp "$SRC/arctic_inference/__init__.py" "$SRC/LICENSE" "$OUT/"
cp "$SRC/arctic_inference/suffix_decoding/__init__.py" "$SRC/arctic_inference/suffix_decoding/cache.py" "$OUT/suffix_decoding/"
cp "$W"/lib/_C*.so "$OUT/suffix_decoding/"
# it must import and draft on the interpreter it was built for
PYTHONPATH=.whl/site "$W/py/bin/python" -c "
from arctic_inference.suffix_decoding import SuffixDecodingCache
c = SuffixDecodingCache(max_tree_depth=8, max_cached_requests=4)
c.start_request('a', [1, 2, 3, 4, 1, 2, 3]); d = c.speculate('a', [1, 2, 3, 4, 1, 2, 3], max_spec_tokens=4)
assert d.token_ids[:1] == [4], d.token_ids
print('arctic_inference', '$VERSION', 'suffix decoding built into .whl/site:', d.token_ids)"
du -sh .whl/site
