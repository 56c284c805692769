#!/usr/bin/env bash
# How the SmolLM2 draft was trained: one device call, from the repository root, with runs/smollm2-carry/ carried
# (made here, see REPORT.md: the non-Python part of the v2 corpus archive cut to 32 MB of text, a held-out subset,
# and SmolLM2's config and tokenizer.json (xz) from `completer.models.gguf.materialise`; no weights).
#
#   bash completer/models/house/smollm2/train_device.sh MINUTES OUT_FOLDER
#
# Writes OUT/draft.tar.part* (the draft in bf16 + tokenizer + train_meta.json with the held-out cross-entropy,
# checkpointed every 2 minutes, so a killed run still returns a draft) and OUT/train.log. PRESET, PY_MB and
# TRAIN_ARGS override the defaults (the CPU smoke test uses them).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
minutes=${1:?minutes of training}; out=${2:?output folder}
carry=runs/smollm2-carry
mkdir -p "$out"
t0=$(date +%s)
nvidia-smi -L 2>/dev/null
python3 -c "import sys, torch, tokenizers; print(sys.version.split()[0], torch.__version__, tokenizers.__version__)"
python3 -c "import lzma, shutil; shutil.copyfileobj(lzma.open('$carry/target/tokenizer.json.xz'), \
open('$carry/target/tokenizer.json', 'wb'))" || exit
# the carried multi-language archive (no Python) and this machine's own Python train split (v1's split rule)
# shellcheck disable=SC2086
python3 -m completer.training.train --draft-for "$carry/target" --preset "${PRESET:-h200}" \
  --corpus "$carry/train.jsonl.xz" --corpus python --corpus-mb "${PY_MB:-120}" --heldout "$carry/heldout.jsonl.xz" \
  --minutes "$minutes" --total-minutes "$(python3 -c "print($minutes + 1.6)")" --checkpoint-minutes 2 \
  --out /tmp/smollm2_draft --archive "$out/draft.tar" ${TRAIN_ARGS:-} 2>&1 | tee "$out/train.log"
rc=$?
echo "train rc=$rc after $(( $(date +%s) - t0 )) s"
exit $rc
