# device call: three DFlash drafters for house v2 trained side by side on the one GPU (torch only, no vLLM);
# each process is launch-bound at this size, so three run in about the time of one. Run from the tree's root.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi > $OUT/nvidia-smi.txt; nproc > $OUT/nproc.txt
python3 -c "import torch, tqdm, safetensors, tokenizers; print(torch.__version__, torch.cuda.get_device_name(0))"
# unpack the packed target once, before three processes would race to write the same cache folder
python3 -c "from completer.models import resolve_model; print(resolve_model('house:v2/target'))" || exit 2
TD=(python3 -c "import sys; from completer.models.drafter import main; sys.exit(main(sys.argv[1:]))"
    --method dflash --target house:v2/target --corpus .corpus/train.jsonl.xz --sequences 24000 --gen-tokens 64
    --gen-batch 256 --anchors 48 --minutes ${MINUTES:-5} --eval-prompts 0 --causal)
for v in "l2b5:--layers 2 --block 5" "l4b9:--layers 4 --block 9" "l6b9:--layers 6 --block 9"; do
  name=${v%%:*}; opts=${v#*:}
  timeout 560 "${TD[@]}" $opts --out $OUT/dflash-$name > $OUT/train-$name.log 2>&1 &
done
while [ -n "$(jobs -r)" ]; do sleep 30; for f in $OUT/train-*.log; do echo "$f: $(tail -c 300 $f | tr '\r' '\n' | tail -1)"; done; done
wait
for f in $OUT/train-*.log; do echo "== $f"; tr '\r' '\n' < $f | grep -v "^\s*$" | tail -4; done
du -sh $OUT/*
