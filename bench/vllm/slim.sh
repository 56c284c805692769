#!/usr/bin/env bash
# A device call carries the working tree and at most 64 MiB in all; the tree is ~74 MB with the committed results
# and the v1 house weights, which no vLLM measurement of house v2 reads. From the project root:
#   bash bench/vllm/slim.sh out    # move them to /tmp/completer-slim (the tree is then ~19 MB)
#   bash bench/vllm/slim.sh out tests   # the same but keep the v1 pair, which tests/vllm runs on (~44 MB)
#   bash bench/vllm/slim.sh in     # put them back (do this before any commit: git would record them as deleted)
#   bash bench/vllm/slim.sh size   # what a call would carry of the tree now
# While slimmed, a pre-commit hook refuses commits (installed by `out` when the repository has none).
set -eu
HOLD=/tmp/completer-slim
PATHS="bench/results completer/models/house/target completer/models/house/draft completer/models/house/eagle3 completer/models/house/smollm2"
MOVE=$PATHS
[ "${2:-}" = tests ] && MOVE="bench/results completer/models/house/eagle3 completer/models/house/smollm2"
size() { git ls-files -z --cached --others --exclude-standard | xargs -0 du -b 2>/dev/null | awk '{s+=$1} END {printf "%.1f MB in the tree\n", s/1e6}'; }
case "${1:-}" in
  out)
    [ -e "$HOLD/.slim" ] && { echo "already slimmed (see $HOLD)"; exit 1; }
    git diff --quiet -- $PATHS || { echo "uncommitted changes under the paths to move: commit them first"; exit 1; }
    mkdir -p "$HOLD"
    for p in $MOVE; do mkdir -p "$HOLD/$(dirname "$p")"; mv "$p" "$HOLD/$p"; done
    touch "$HOLD/.slim"
    hook=$(git rev-parse --git-path hooks)/pre-commit; mkdir -p "$(dirname "$hook")"
    [ -e "$hook" ] || { printf '#!/bin/sh\n[ -e %s/.slim ] && { echo "slimmed for the device: bash bench/vllm/slim.sh in first"; exit 1; }\nexit 0\n' "$HOLD" > "$hook"; chmod +x "$hook"; }
    size ;;
  in)
    [ -e "$HOLD/.slim" ] || { echo "not slimmed"; exit 1; }
    for p in $PATHS; do [ -e "$HOLD/$p" ] || continue; mkdir -p "$(dirname "$p")"; mv "$HOLD/$p" "$p"; done
    rm -f "$HOLD/.slim"; git status --short | head ;;
  size) size ;;
  *) echo "usage: bash bench/vllm/slim.sh out [tests]|in|size"; exit 2 ;;
esac
