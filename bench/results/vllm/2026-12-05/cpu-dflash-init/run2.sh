# The repeat: random against last, another seed, nothing else running on the machine.
cd /work/main && . .venv/bin/activate
for init in random last; do
  completer train-drafter --method dflash --target house:v2/target --device cpu --corpus .corpus/train.jsonl.xz \
    --corpus-mb 20 --dflash-data text --seq-len 256 --batch 8 --anchors 32 --seed 7 \
    --layers 3 --block 7 --causal --dflash-init $init --minutes 8 --heldout .corpus/heldout.jsonl.xz \
    --eval-prompts 40 --out /tmp/dinit/$init-s7 > /tmp/dinit/$init-s7.log 2>&1
  echo "$init-s7 rc $?" >> /tmp/dinit/done
done
