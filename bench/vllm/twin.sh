#!/usr/bin/env bash
# Issue 32 on the lent GPU machine: the 7B cost twin of house v2 (completer twin, ../shared/cost-twin.md), built
# there in bf16 (~13 GB, never carried), then measured: greedy drift from the house model in bf16, `completer tune`
# on vLLM (none against the twin EAGLE-3 drafter at each k; the draft model twin, ngram, suffix when asked), and the
# websocket replay with tune's pick against none.
#
# A call carries the main checkout's tree, so this branch's code travels as an archive (.device-carry/twin.tar.gz:
# `git archive` of completer bench lsp pyproject.toml, no house weights: they are linked from the carried tree) and
# the vLLM bundle as two parts (.device-carry/tw/00, 01: build.sh's parts re-cut in two so that each fits beside the
# slimmed tree, bench/vllm/slim.sh), in two calls back to back while the machine stays warm:
#   call 1: tar -xzf .device-carry/twin.tar.gz -C /tmp/tw && bash /tmp/tw/bench/vllm/twin.sh build drift
#           carry [.device-carry/twin.tar.gz, .device-carry/tw/00, .device-carry/bin]
#   call 2: tar -xzf .device-carry/twin.tar.gz -C /tmp/tw && bash /tmp/tw/bench/vllm/twin.sh build tune
#           carry [.device-carry/twin.tar.gz, .device-carry/tw/01, .device-carry/bin]
# (build is skipped when the twin is there; a fresh machine builds it again.) Parts:
#   build   completer twin --shape 7b (target, eagle3, draft 0.5b) -> $TWIN            (~1-2 min, CPU + disk)
#   drift   bench/twin_drift.py on the GPU, bf16: house vs twin greedy, per prompt the first differing token
#   tune    completer tune --backend vllm on the twin: none, eagle3 k=$TUNE_KS (TUNE_ONLY to change), editor and
#           48-token requests, engines side by side, rounds interleaved; choices -> runs/tune-twin
#   house   completer tune on house:v2/target, none only, same requests: its outputs against the twin's (vLLM drift)
#   lsp     bench/vllm/lsp_device.py twin-none,twin-auto (needs the server's wheels in .whl, as device.sh)
# Everything goes to $OUT/twin as it comes.
set -u
export PYTHONUNBUFFERED=1
MAIN=$PWD                                            # the carried main tree (house weights, bundle parts)
HERE=$(cd "$(dirname "$0")/../.." && pwd)            # this branch's code
[ -e "$HERE/completer/models/house" ] || ln -sfn "$MAIN/completer/models/house" "$HERE/completer/models/house"
O=${OUT:-/tmp/out}/twin; mkdir -p "$O" "$HERE/runs"
TWIN=${TWIN:-/tmp/completer-dummy-models/twin}       # lsp_device.py's --allow-model-dir holds it
# the vLLM bundle's parts (whichever this call carries) collect in /tmp/bundle; stage.sh unpacks once all are there
mkdir -p /tmp/bundle
for d in "$MAIN"/.device-carry/tw/[0-9][0-9]; do [ -d "$d" ] && cp "$d"/part.* /tmp/bundle/ && cp "$d/of" /tmp/bundle/of; done
staged=1
if [ -f "$MAIN/.device-carry/bin/stage.sh" ]; then . "$MAIN/.device-carry/bin/stage.sh" && staged=0; fi
cd "$HERE"
export PYTHONPATH=$HERE${PYTHONPATH:+:$PYTHONPATH}
if [ -d "$MAIN/.whl" ] && [ ! -f /tmp/extra-site/.ok ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/extra-site "$MAIN"/.whl/*.whl 2>&1 | grep -v WARNING; touch /tmp/extra-site/.ok
fi
[ -d /tmp/extra-site ] && export PYTHONPATH=$PYTHONPATH:/tmp/extra-site
nvidia-smi > "$O/nvidia-smi.txt" 2>&1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$O/gpu.txt" 2>&1
echo "cost-twin code: $(cat "$HERE/COMMIT" 2>/dev/null)" > "$O/code.txt"
TUNE=(python3 -c "import sys; from completer.tune import main; sys.exit(main(sys.argv[1:]))")
needs_vllm() { [ "$staged" = 0 ] || { echo "$1: the vLLM bundle is not complete yet (carry the other part)"; return 1; }; }
for part in "$@"; do
  echo "== $part $(date -u +%T)"
  case $part in
    build) if [ -f "$TWIN/twin.json" ]; then echo "twin already built"; continue; fi
           t0=$(date +%s); python3 -m completer.cli twin --target house:v2/target --drafter house:v2/eagle3 \
             --draft house:v2/draft --shape 7b --draft-shape 0.5b --dtype bf16 --out "$TWIN" > "$O/build.log" 2>&1
           echo "build rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "twin:" "$O/build.log"; cp "$TWIN/twin.json" "$O/"
           du -sh "$TWIN"/* ;;
    drift) timeout "${DRIFT_S:-150}" python3 bench/twin_drift.py --twin "$TWIN/target" --device cuda --dtype bf16 \
             --n "${DRIFT_N:-24}" --tokens "${DRIFT_TOKENS:-128}" --out "$O/drift_gpu_bf16.json" > "$O/drift.log" 2>&1
           echo "drift rc=$?"; tail -22 "$O/drift.log" ;;
    tune)  needs_vllm tune || continue
           COMPLETER_TUNE_DIR=$HERE/runs/tune-twin timeout "${TUNE_S:-560}" "${TUNE[@]}" --backend vllm \
             --model "$TWIN/target" --drafter "$TWIN/eagle3" --draft "$TWIN/draft" --ks "${TUNE_KS:-2,3,4}" \
             --only "${TUNE_ONLY:-eagle3 k=2,eagle3 k=3,eagle3 k=4}" --requests editor,fixed --n "${TUNE_N:-12}" \
             --rounds "${TUNE_ROUNDS:-3}" ${TUNE_ARGS:-} --out "$O/tune.json" > "$O/tune.log" 2>&1
           echo "tune rc=$?"; grep -v "EngineCore\|^INFO\|^WARNING\|^(EngineCore\|it/s\]" "$O/tune.log" | tail -40
           tar -cf "$O/tune-choices.tar" -C "$HERE" runs/tune-twin 2>/dev/null ;;
    house) needs_vllm house || continue
           COMPLETER_TUNE_DIR=/tmp/tune-house timeout "${HOUSE_S:-200}" "${TUNE[@]}" --backend vllm --model house:v2/target \
             --only none --requests editor,fixed --n "${TUNE_N:-12}" --rounds 1 --out "$O/tune_house_none.json" \
             > "$O/tune_house.log" 2>&1
           echo "house rc=$?"; grep -v "EngineCore\|^INFO\|^WARNING\|^(EngineCore\|it/s\]" "$O/tune_house.log" | tail -15 ;;
    lsp)   needs_vllm lsp || continue
           COMPLETER_TUNE_DIR=$HERE/runs/tune-twin timeout "${LSP_S:-560}" python3 bench/vllm/lsp_device.py --out /tmp/lsp-twin \
             --tar "$O/lsp-twin.tar.gz" --stages "${LSP_STAGES:-twin-none,twin-auto}" \
             --deadline-s "$(( ${LSP_S:-560} - 15 ))" > "$O/lsp.log" 2>&1
           echo "lsp rc=$?"; tail -30 "$O/lsp.log" ;;
    *) echo "unknown part $part" ;;
  esac
done
ls -la "$O"
