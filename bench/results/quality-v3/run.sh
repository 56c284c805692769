#!/bin/bash
cd /work/main && . .venv/bin/activate
OLD='"settings": {"heal_word": false}, "healing_rules": {"ANY_PREFIX_TOKEN": true, "WHITESPACE_AFTER_HEAL": true}'
cat /proc/loadavg   # before
date -u
python -m bench.quality --out bench/results/quality-v3 --per-kind 6 \
  --compare 'v2:v1' --compare 'v2:v1 rules-v2' --compare 'v2 rules-v2:v1 rules-v2' --compare 'v2:v2 rules-v2' --compare 'v1:v1 rules-v2' \
  --config 'v1={"model": "house:target", "speculation": "none"}' \
  --config 'v1 -token_healing={"model": "house:target", "speculation": "none", "settings": {"token_healing": false}}' \
  --config "v1 rules-v2={\"model\": \"house:target\", \"speculation\": \"none\", $OLD}" \
  --config 'v2={"model": "house:v2/target", "speculation": "none"}' \
  --config 'v2 -token_healing={"model": "house:v2/target", "speculation": "none", "settings": {"token_healing": false}}' \
  --config 'v2 -heal_word={"model": "house:v2/target", "speculation": "none", "settings": {"heal_word": false}}' \
  --config 'v2 +ANY_PREFIX_TOKEN={"model": "house:v2/target", "speculation": "none", "healing_rules": {"ANY_PREFIX_TOKEN": true}}' \
  --config 'v2 +WHITESPACE_AFTER_HEAL={"model": "house:v2/target", "speculation": "none", "healing_rules": {"WHITESPACE_AFTER_HEAL": true}}' \
  --config "v2 rules-v2={\"model\": \"house:v2/target\", \"speculation\": \"none\", $OLD}"
echo rc=$?
cat /proc/loadavg   # after
date -u
