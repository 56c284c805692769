#!/usr/bin/env bash
# completer tune for the SmolLM2 pair (CPU, engine's default threads), under the shared bench lock; the saved choice
# goes to a scratch COMPLETER_TUNE_DIR so no one else's speculation='auto' on this box is changed by it.
set -e
out=bench/results/speculation-smollm2/tune
cat /proc/loadavg > "$out/loadavg.txt"
COMPLETER_TUNE_DIR=/tmp/D-tune flock /tmp/brief/bench.lock completer tune --model gguf:smollm2 \
  --draft house:smollm2/draft --ks 2,4 --only 'draft k=2,draft k=4,ngram k=4,draft adaptive' \
  --out "$out/tune.json" 2>&1 | tr '\r' '\n' | grep -v 'it/s\]$\|s/it\]$' > "$out/run.out"
cat /proc/loadavg >> "$out/loadavg.txt"
