#!/usr/bin/env bash
# How house v2 was trained: one device call, from the repository root, with .corpus/ (the archive and tokenizer made
# here by `python -m completer.training.corpus build .corpus` and `python -m completer.models.tokenizer
# .corpus/train.jsonl.xz .corpus/tokenizer --mb 30`) carried along.
#
#   bash completer/models/house/v2/train_device.sh MINUTES OUT_FOLDER
#
# Writes OUT/v2.tar.part* (the pair in bf16 + tokenizer + train_meta.json, checkpointed every 2.5 minutes, so a
# killed run still returns a pair), OUT/train.log, OUT/eval.json (per-language held-out figures of v2 and v1) and
# OUT/eval.log. PRESET, TRAIN_ARGS, EVAL_ARGS and EVAL_S override the defaults (the CPU smoke test uses them).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
minutes=${1:?minutes of training}; out=${2:?output folder}
mkdir -p "$out"
t0=$(date +%s)
nvidia-smi -L 2>/dev/null
python3 -c "import sys, torch, tokenizers; print(sys.version.split()[0], torch.__version__, tokenizers.__version__)"
# shellcheck disable=SC2086
python3 -m completer.training.train --preset "${PRESET:-h200}" --corpus .corpus/train.jsonl.xz --corpus-mb 200 \
  --tokenizer .corpus/tokenizer --minutes "$minutes" --total-minutes "$(python3 -c "print($minutes + 1.5)")" \
  --checkpoint-minutes 2.5 --out /tmp/house_v2 --archive "$out/v2.tar" ${TRAIN_ARGS:-} 2>&1 | tee "$out/train.log"
rc=$?
echo "train rc=$rc after $(( $(date +%s) - t0 )) s"
# shellcheck disable=SC2086
timeout "${EVAL_S:-120}" python3 -m completer.training.evaluate --models /tmp/house_v2 completer/models/house \
  --heldout .corpus/heldout.jsonl.xz --tasks 30 --loss-mb 0.3 --json "$out/eval.json" ${EVAL_ARGS:-} \
  > "$out/eval.log" 2>&1
echo "eval rc=$? after $(( $(date +%s) - t0 )) s"
tail -c 3000 "$out/eval.log"
exit $rc
