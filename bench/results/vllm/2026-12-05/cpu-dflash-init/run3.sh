# The learning rate from the target's last layers: 3e-3 against the 1e-3 of run2.sh's last-s7 (same seed).
cd /work/main && . .venv/bin/activate
for lr in 3e-3; do
  completer train-drafter --method dflash --target house:v2/target --device cpu --corpus .corpus/train.jsonl.xz \
    --corpus-mb 20 --dflash-data text --seq-len 256 --batch 8 --anchors 32 --seed 7 --lr $lr \
    --layers 3 --block 7 --causal --dflash-init last --minutes 8 --heldout .corpus/heldout.jsonl.xz \
    --eval-prompts 40 --out /tmp/dinit/last-s7-lr$lr > /tmp/dinit/last-s7-lr$lr.log 2>&1
  echo "last-s7-lr$lr rc $?" >> /tmp/dinit/done
done
