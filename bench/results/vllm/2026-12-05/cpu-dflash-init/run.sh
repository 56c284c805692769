# Same drafter and budget as ../../2026-12-04g/cpu-text-vs-continuations (text rows), three starting points.
cd /work/main && . .venv/bin/activate
mkdir -p /tmp/dinit
for init in random first last; do
  completer train-drafter --method dflash --target house:v2/target --device cpu --corpus .corpus/train.jsonl.xz \
    --corpus-mb 20 --dflash-data text --seq-len 256 --batch 8 --anchors 32 \
    --layers 3 --block 7 --causal --dflash-init $init --minutes 8 --heldout .corpus/heldout.jsonl.xz \
    --eval-prompts 40 --out /tmp/dinit/$init > /tmp/dinit/$init.log 2>&1
  echo "$init rc $?" >> /tmp/dinit/done
done
