#!/usr/bin/env bash
# One run of the SmolLM2 speculation benchmark (CPU, embedded engine), under the shared bench lock; RUN names the
# output folder, THREADS the torch threads (default 1, as bench/speculation.py).
set -e
run=${RUN:?output folder name}; out=bench/results/speculation-smollm2/$run
mkdir -p "$out"
cat /proc/loadavg > "$out/loadavg.txt"
flock /tmp/brief/bench.lock python bench/speculation.py --model gguf:smollm2 --draft house:smollm2/draft --ks 2 4 \
  --configs none 'draft k=2' 'draft k=4' 'ngram k=4' 'draft adaptive' 'draft+ngram adaptive' \
  --prompts 12 --repeats 3 --max-tokens 48 --threads "${THREADS:-1}" --out "$out/speculation" 2>&1 \
  | tr '\r' '\n' | grep -v 'completion/s\]$\|s/completion\]$' > "$out/run.out"
cat /proc/loadavg >> "$out/loadavg.txt"
