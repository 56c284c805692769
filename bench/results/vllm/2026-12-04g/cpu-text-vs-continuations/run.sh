cd /work/main && . .venv/bin/activate
for data in text continuations; do
  completer train-drafter --method dflash --target house:v2/target --device cpu --corpus .corpus/train.jsonl.xz \
    --corpus-mb 20 --dflash-data $data --sequences 300 --gen-tokens 48 --seq-len 256 --batch 8 --anchors 32 \
    --layers 3 --block 7 --causal --minutes 8 --heldout .corpus/heldout.jsonl.xz --eval-prompts 40 \
    --out /tmp/cpucmp/$data > /tmp/cpucmp/$data.log 2>&1
  echo "$data rc $?" >> /tmp/cpucmp/done
done
