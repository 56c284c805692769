# device call: staged vLLM + wheels, then tune runs; $1 = which
. .device-carry/bin/stage.sh || exit 2
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/extra-site .whl/*.whl 2>&1 | grep -v WARNING
export PYTHONPATH=$PWD:/tmp/extra-site:$PYTHONPATH PYTHONUNBUFFERED=1 COMPLETER_TUNE_DIR=$OUT/choices
nvidia-smi > $OUT/nvidia-smi.txt; nproc > $OUT/nproc.txt; git log --oneline -1 > $OUT/code.txt 2>/dev/null || true
TUNE=(python3 -c "import sys; from completer.tune import main; sys.exit(main(sys.argv[1:]))" --backend vllm --model house:v2/target)
if [ "$1" = a ]; then
  echo "== fixed"; timeout 230 "${TUNE[@]}" --ks 2,3 --only "eagle3 k=2,eagle3 k=3,ngram k=2" --requests fixed --n 24 --rounds 5 --out $OUT/tune-fixed.json > $OUT/tune-fixed.log 2>&1; echo "rc $?"; tail -8 $OUT/tune-fixed.log
  echo "== profile"; timeout 140 /tmp/extra-site/bin/py-spy record --subprocesses --nonblocking --idle -r 250 --format raw -o $OUT/pyspy.txt -- "${TUNE[@]}" --ks 2 --only "eagle3 k=2" --requests fixed --n 24 --rounds 3 --out $OUT/tune-prof.json > $OUT/tune-prof.log 2>&1; echo "rc $?"; tail -5 $OUT/tune-prof.log; xz -9 $OUT/pyspy.txt; ls -la $OUT
  echo "== editor"; timeout 200 "${TUNE[@]}" --ks 2,3 --only "eagle3 k=2,eagle3 k=3,ngram k=2" --n 32 --rounds 5 --out $OUT/tune-editor.json > $OUT/tune-editor.log 2>&1; echo "rc $?"; tail -8 $OUT/tune-editor.log
fi
if [ "$1" = b ]; then
  echo "== fixed"; timeout 340 "${TUNE[@]}" --ks 2,3 --only "eagle3 k=2,eagle3 k=3" --requests fixed --n 24 --rounds 5 --out $OUT/tune-fixed.json > $OUT/tune-fixed.log 2>&1; echo "rc $?"; grep -v "EngineCore\|^INFO\|^WARNING" $OUT/tune-fixed.log | tail -12
  echo "== editor"; timeout 270 "${TUNE[@]}" --ks 2,3 --only "eagle3 k=2,eagle3 k=3" --n 32 --rounds 5 --out $OUT/tune-editor.json > $OUT/tune-editor.log 2>&1; echo "rc $?"; grep -v "EngineCore\|^INFO\|^WARNING" $OUT/tune-editor.log | tail -12
fi
if [ "$1" = c ]; then
  echo "== fixed"; timeout 400 "${TUNE[@]}" --ks 2,3 --only "eagle3 k=2,eagle3 k=3" --requests fixed --n 24 --rounds 5 --out $OUT/tune-fixed.json > $OUT/tune-fixed.log 2>&1; echo "rc $?"; grep -v "EngineCore\|^INFO\|^WARNING" $OUT/tune-fixed.log | tail -12
fi
