#!/usr/bin/env bash
# The vLLM measurements on the lent GPU machine, from the project root. Every call that carries bundle parts runs
# this (it hands them to stage.sh, which collects them while the machine stays warm); parts that need vLLM wait for
# the call that completes the bundle (see ../shared/vllm-on-device/README.md), train-dflash needs torch alone:
#   bash bench/vllm/device.sh house dummy          # (1) and (2) of issue 8, JSON + logs into $OUT/vllm
#   bash bench/vllm/device.sh tests                # tests/vllm on the GPU (pytest from the carried .whl/; TESTS_K=expr)
#   bash bench/vllm/device.sh lsp                  # (4): bench/replay.py over --ws driving the vLLM backend
#   TP=2 bash bench/vllm/device.sh dummy lsp       # issue 7: the same with tensor parallelism
# Issue 15 (house v2; what one part leaves in runs/ stays for the next call while the machine is warm):
#   bash bench/vllm/device.sh train-dflash         # a DFlash drafter -> runs/dflash (+ $OUT/vllm/dflash.tar); carry .corpus
#   bash bench/vllm/device.sh tune                 # completer tune, editor + fixed requests, choices -> runs/tune
#                                                  # (with runs/dflash or DFLASH=folder when present)
#   bash bench/vllm/device.sh lsp-auto             # websocket replay: none against what tune chose (runs/tune)
#   LSP_STAGES=house-v2-none,house-v2-suffix bash bench/vllm/device.sh lsp-auto   # or against given stages
# suffix decoding (TUNE_ONLY="suffix k=8,..."; stage house-v2-suffix) needs .whl/site from bench/vllm/arctic_suffix.sh
# Afterwards, here: python bench/vllm/report.py <fetched>/vllm  -> bench/results/vllm/FIGURES.md + plot
set -u
export PYTHONUNBUFFERED=1
staged=1
if [ -d .device-carry/bin ]; then . .device-carry/bin/stage.sh && staged=0; fi
O=${OUT:-/tmp/out}/vllm; mkdir -p "$O" runs
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
TP=${TP:-1}
nvidia-smi > "$O/nvidia-smi.txt" 2>&1
git log --oneline -1 > "$O/code.txt" 2>/dev/null || true
# pytest and the language server's dependencies (not on the GPU image) from the carried wheels
if [ -d .whl ] && [ ! -f /tmp/extra-site/.ok ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/extra-site .whl/*.whl 2>&1 | grep -v WARNING; touch /tmp/extra-site/.ok
fi
# suffix decoding's tree for vLLM's method "suffix" (arctic-inference, built here by bench/vllm/arctic_suffix.sh)
if [ -d .whl/site ] && [ -d /tmp/extra-site ]; then cp -r .whl/site/. /tmp/extra-site/; fi
[ -d /tmp/extra-site ] && export PYTHONPATH=$PYTHONPATH:/tmp/extra-site
DRAFTER=(python3 -c "import sys; from completer.training.drafter import main; sys.exit(main(sys.argv[1:]))")
TUNE=(python3 -c "import sys; from completer.tune import main; sys.exit(main(sys.argv[1:]))")
needs_vllm() { [ "$staged" = 0 ] || { echo "$1: the vLLM bundle is not complete yet (carry the remaining parts)"; return 1; }; }
for part in "$@"; do
  echo "== $part $(date -u +%T)"
  case $part in
    house) needs_vllm house || continue
           timeout "${HOUSE_S:-330}" python3 bench/vllm/house.py --out "$O" --tensor-parallel-size "$TP" ${HOUSE_ARGS:-} > "$O/house.log" 2>&1; echo "house rc=$?"; grep -v "it/s\]" "$O/house.log" | grep -E "^(none|draft|ngram|eagle3)|failed|Error|skipped" | tail -20 ;;
    dummy) needs_vllm dummy || continue
           timeout "${DUMMY_S:-240}" python3 bench/vllm/dummy.py --out "$O" --tensor-parallel-size "$TP" ${DUMMY_ARGS:-} > "$O/dummy_tp$TP.log" 2>&1; echo "dummy rc=$?"; grep -E "params|^eagle3|failed|Error|skipped" "$O/dummy_tp$TP.log" | tail -20 ;;
    tests) needs_vllm tests || continue
           timeout "${TESTS_S:-420}" python3 -m pytest -rs -v tests/vllm ${TESTS_K:+-k "$TESTS_K"} > "$O/tests.log" 2>&1; echo "tests rc=$?"; tail -25 "$O/tests.log" ;;
    train-dflash)
           # text mode (corpus windows labelled with the target's own chain), from the target's last layers, lr 3e-3:
           # what trained fastest in bench/results/vllm/2026-12-04g and 2026-12-05 (CPU, 8 minutes each)
           timeout "${TRAIN_S:-450}" "${DRAFTER[@]}" --method dflash --target house:v2/target --corpus .corpus/train.jsonl.xz \
             --corpus-mb 150 --dflash-data text --dflash-init last --lr 3e-3 --batch 32 --anchors 64 --layers 3 --block 7 --causal \
             --minutes "${TRAIN_MIN:-5}" --eval-prompts 0 --out runs/dflash ${DFLASH_ARGS:-} > "$O/train.log" 2>&1
           echo "train-dflash rc=$?"; tr '\r' '\n' < "$O/train.log" | grep -v "^\s*$" | tail -6
           tar -cf "$O/dflash.tar" runs/dflash ;;
    tune)  needs_vllm tune || continue
           # a DFlash folder only when there is one (2026-12-05b: tune refused a --dflash folder that was not carried)
           DFLASH_ARG=(); d=${DFLASH:-$PWD/runs/dflash}; [ -f "$d/config.json" ] && DFLASH_ARG=(--dflash "$d")
           # the shipped EAGLE-3 drafter against DFlash (runs/dflash, or DFLASH=folder), both request shapes
           COMPLETER_TUNE_DIR=$PWD/runs/tune timeout "${TUNE_S:-560}" "${TUNE[@]}" --backend vllm --model house:v2/target \
             ${DFLASH_ARG[@]+"${DFLASH_ARG[@]}"} --ks "${TUNE_KS:-2,3,6}" --only "${TUNE_ONLY:-eagle3 k=2,dflash k=3,dflash k=6}" \
             --requests editor,fixed --n "${TUNE_N:-24}" --rounds "${TUNE_ROUNDS:-4}" --out "$O/tune.json" > "$O/tune.log" 2>&1
           echo "tune rc=$?"; grep -v "EngineCore\|^INFO\|^WARNING\|^(EngineCore" "$O/tune.log" | tail -30
           tar -cf "$O/tune-choices.tar" runs/tune ;;
    lsp-auto) needs_vllm lsp-auto || continue
           COMPLETER_TUNE_DIR=$PWD/runs/tune timeout "${LSP_S:-560}" python3 bench/vllm/lsp_device.py --out /tmp/lsp-auto \
             --tar "$O/lsp-auto.tar.gz" --stages "${LSP_STAGES:-house-v2-none,house-v2-auto}" --deadline-s "$(( ${LSP_S:-560} - 15 ))" > "$O/lsp-auto.log" 2>&1
           echo "lsp-auto rc=$?"; tail -30 "$O/lsp-auto.log" ;;
    lsp)   needs_vllm lsp || continue
           timeout "${LSP_S:-400}" python3 -m bench.replay bench/traces --transport ws \
             --configs "${LSP_CONFIGS:-none,draft-k4}" --engine backend=vllm --engine gpu_memory_utilization=0.3 \
             --engine tensor_parallel_size="$TP" --out "$O" --name "lsp_vllm_tp$TP" > "$O/lsp_tp$TP.log" 2>&1; echo "lsp rc=$?"; tail -30 "$O/lsp_tp$TP.log" ;;
    *) echo "unknown part $part" ;;
  esac
done
ls -la "$O"
