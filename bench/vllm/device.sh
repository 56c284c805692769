#!/usr/bin/env bash
# The vLLM measurements on the lent GPU machine, from the project root, in the device call that completes the
# vLLM bundle (see ../shared/vllm-on-device/README.md) or any later call on the warm machine:
#   bash bench/vllm/device.sh house dummy          # (1) and (2) of issue 8, JSON + logs into $OUT/vllm
#   bash bench/vllm/device.sh tests                # tests/vllm on the GPU (pytest from the carried .whl/)
#   bash bench/vllm/device.sh lsp                  # (4): bench/replay.py over --ws driving the vLLM backend
#   TP=2 bash bench/vllm/device.sh dummy lsp       # issue 7: the same with tensor parallelism
# Afterwards, here: python bench/vllm/report.py <fetched>/vllm  -> bench/results/vllm/FIGURES.md + plot
set -u
export PYTHONUNBUFFERED=1
. .device-carry/bin/stage.sh || { echo "bundle not complete"; exit 2; }
O=${OUT:-/tmp/out}/vllm; mkdir -p "$O"
export PYTHONPATH=$PWD:$PYTHONPATH
TP=${TP:-1}
nvidia-smi > "$O/nvidia-smi.txt" 2>&1
# pytest and the language server's dependencies (not on the GPU image) from the carried wheels
if [ -d .whl ] && [ ! -f /tmp/extra-site/.ok ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/extra-site .whl/*.whl 2>&1 | grep -v WARNING; touch /tmp/extra-site/.ok
fi
for part in "$@"; do
  echo "== $part $(date -u +%T)"
  case $part in
    house) timeout "${HOUSE_S:-330}" python3 bench/vllm/house.py --out "$O" --tensor-parallel-size "$TP" ${HOUSE_ARGS:-} > "$O/house.log" 2>&1; echo "house rc=$?"; grep -v "it/s\]" "$O/house.log" | grep -E "^(none|draft|ngram|eagle3)|failed|Error|skipped" | tail -20 ;;
    dummy) timeout "${DUMMY_S:-240}" python3 bench/vllm/dummy.py --out "$O" --tensor-parallel-size "$TP" ${DUMMY_ARGS:-} > "$O/dummy_tp$TP.log" 2>&1; echo "dummy rc=$?"; grep -E "params|^eagle3|failed|Error|skipped" "$O/dummy_tp$TP.log" | tail -20 ;;
    tests) PYTHONPATH=/tmp/extra-site:$PYTHONPATH timeout "${TESTS_S:-420}" python3 -m pytest -rs -v tests/vllm > "$O/tests.log" 2>&1; echo "tests rc=$?"; tail -25 "$O/tests.log" ;;
    lsp)   PYTHONPATH=/tmp/extra-site:$PYTHONPATH timeout "${LSP_S:-400}" python3 -m bench.replay bench/traces --transport ws \
             --configs "${LSP_CONFIGS:-none,draft-k4}" --engine backend=vllm --engine gpu_memory_utilization=0.3 \
             --engine tensor_parallel_size="$TP" --out "$O" --name "lsp_vllm_tp$TP" > "$O/lsp_tp$TP.log" 2>&1; echo "lsp rc=$?"; tail -30 "$O/lsp_tp$TP.log" ;;
    *) echo "unknown part $part" ;;
  esac
done
ls -la "$O"
