# device call: one DFlash drafter for house v2 (torch only, no vLLM), batched training (a batch of sequences in one
# target forward and one drafter forward); the result comes back as one tar (a call returns at most 8 files)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi > $OUT/nvidia-smi.txt
timeout ${LIMIT:-500} python3 -c "import sys; from completer.models.drafter import main; sys.exit(main(sys.argv[1:]))" \
  --method dflash --target house:v2/target --corpus .corpus/train.jsonl.xz --corpus-mb ${MB:-80} --sequences ${SEQ:-12000} \
  --gen-tokens 64 --gen-batch 256 --batch 32 --anchors 32 --layers ${LAYERS:-3} --block ${BLOCK:-7} --causal \
  --minutes ${MINUTES:-4} --eval-prompts 0 --out /tmp/dflash > $OUT/train.log 2>&1
echo "rc $?"; tr '\r' '\n' < $OUT/train.log | grep -v "^\s*$" | awk 'NR%8==1' | tail -30; tail -c 600 $OUT/train.log
tar -C /tmp -cf $OUT/dflash.tar dflash
# the held-out report as house:v2/eagle3's was made (40 FIM prompts per language of the held-out archive)
timeout ${REPORT_LIMIT:-80} python3 -c "import sys; from completer.models.drafter import main; sys.exit(main(sys.argv[1:]))" \
  --method dflash --target house:v2/target --out /tmp/dflash --report-only --heldout .corpus/heldout.jsonl.xz \
  --eval-prompts 40 > $OUT/report.log 2>&1; echo "report rc $?"; tr '\r' '\n' < $OUT/report.log | grep -v "^\s*$" | tail -12
tar -C /tmp -cf $OUT/dflash.tar dflash; ls -la $OUT
