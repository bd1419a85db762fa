#!/usr/bin/env bash
# Issue 34's GPU measurements in one run of about 5 minutes (plus the machine's start), for a session lent a GPU.
# Not run yet: the session that wrote it had no GPU. It fills the rows benchmarks/RESULTS.md marks "not measured".
#
# Prepare here (the development machine; the GPU machine reaches no package registry and gets only the checkout):
#   bash benchmarks/gpu_throughput_tf32_compile.sh --prepare      # .whl/ (the wheels the GPU image lacks) and .carry/assets/
#                                                 # (TAEF2, the CIFAR ResNets, 100 JPEGs a class: about 17 MB)
# Then, with the device tool, from the repository root (timeout_s 600 leaves a margin over the script's own limits):
#   run(command="bash benchmarks/gpu_throughput_tf32_compile.sh", carry=[".whl", ".carry"], timeout_s=600, kind="nvidia-h200")
# (kind: name the card of the baseline, issue 26 measured on an H200; an H100 answers the "10 samples/s on one H100"
# target.) What comes back under $OUT: all.log, tp.json + tp.log (throughput --quick rows and the roofline),
# tf32.json + tf32.log (the TF32 study), compile.json + compile.log (first compile, regional).
#
# Steps, in order of what the issue needs most; each has its own time limit and the last takes what is left of
# BUDGET_S (default 300 s), so a slow step costs the ones after it, never the whole run:
#   1. throughput --quick on vqgan-f16 at batch 128: bf16 compiled (NHWC end to end, memory_format=auto), fp32
#      compiled (the default precision, TF32), first-run seconds (compile included), and the roofline of the best
#      compiled row (the transposes' share is in it).
#   2. the TF32 study: TF32 against strict fp32 on the CIFAR recipe, 1,000 sources, budget 50.
#   3. the first compile of the paper's step with compile_scope=regional (fresh caches), against issue 26's
#      73.5-88.6 s for the full graph.
# Left for a second run (see RESULTS.md): batch 64 rows, TAEF2, compile-nchw (same run's NCHW baseline),
# compile_mode=reduce-overhead, the real command against the benchmark.
set -u
if [ "${1:-}" = "--prepare" ]; then
  set -e
  grep -qx '/.carry/' "$(git rev-parse --git-common-dir)/info/exclude" || echo '/.carry/' >> "$(git rev-parse --git-common-dir)/info/exclude"
  grep -qx '/.whl/' "$(git rev-parse --git-common-dir)/info/exclude" || echo '/.whl/' >> "$(git rev-parse --git-common-dir)/info/exclude"
  rm -rf .whl .carry && mkdir -p .whl .carry/assets/cifar10/test-jpg
  plat="--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
  python3 -m pip download -q --no-deps --only-binary=:all: $plat -d .whl hydra-core==1.3.8 omegaconf==2.3.1 \
    open_clip_torch==3.3.0 ftfy==6.3.1 wcwidth==0.7.0 taming-transformers-rom1504==0.0.6 webdataset==1.0.2 \
    braceexpand==0.1.7 diffusers==0.42.1 importlib_metadata==9.1.0 lazy_loader==0.6 packaging==26.4
  python3 -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3   # it has no wheel on PyPI
  A=../shared/assets
  cp -r "$A/weights" .carry/assets/
  for d in "$A"/cifar10/test-jpg/*/; do  # 100 images a class: the study's 1,000 class-balanced sources
    c=$(basename "$d"); mkdir -p ".carry/assets/cifar10/test-jpg/$c"
    ls "$d" | sort | head -100 | while read -r f; do cp "$d$f" ".carry/assets/cifar10/test-jpg/$c/"; done
  done
  du -sh .whl .carry
  exit 0
fi

OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/all.log") 2>&1
t0=$SECONDS
BUDGET_S=${BUDGET_S:-300}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 GENEVAL_OFFLINE=1 GENEVAL_ASSETS=$PWD/.carry/assets
export GENEVAL_CACHE=/tmp/gcache
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
git log -1 --format='commit %h %s' 2>/dev/null || true
step() {  # step LIMIT NAME CMD...: run CMD with a time limit, log its status and seconds
  local lim=$1 name=$2; shift 2; local s=$SECONDS
  echo "== $name (limit ${lim}s) at $((SECONDS - t0))s"
  timeout -k 5 "$lim" "$@"; echo "== $name rc=$? in $((SECONDS - s))s"
}
step 200 quick python3 -m benchmarks.throughput --device cuda --quick --generators vqgan-f16 --batches 128 \
  --settings compile fp32-compile --naive-samples 0 --phase-repeats 1 --json "$OUT/tp.json" > "$OUT/tp.log" 2>&1
tail -45 "$OUT/tp.log"
step 70 tf32 python3 -m benchmarks.cifar_recipe_studies --only tf32 --device cuda --n 1000 --out /tmp/studies \
  > "$OUT/tf32.log" 2>&1
cp /tmp/studies/tf32/study.json "$OUT/tf32.json" 2>/dev/null; tail -5 "$OUT/tf32.log"
left=$((BUDGET_S - (SECONDS - t0)))
if [ "$left" -gt 40 ]; then
  step "$left" regional python3 -m benchmarks.compile_time --device cuda --paper --generators vqgan-f16 \
    --scopes regional --timeout "$left" --json "$OUT/compile.json" > "$OUT/compile.log" 2>&1
  tail -8 "$OUT/compile.log"
else
  echo "== regional skipped: ${left}s left of ${BUDGET_S}s"
fi
echo "total $((SECONDS - t0))s"
