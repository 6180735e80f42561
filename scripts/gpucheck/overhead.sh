#!/usr/bin/env bash
# The workload's overhead under the library, measured the way noise allows
# on a shared machine: ROUNDS rounds, each running the modes back to back
# (base, traced, PC sampling read every 100 ms, 500 ms (the default) and
# 2 s: on an H200 the overhead did not move with the sampling period, so
# the reads on the launching threads are the suspect); prints each run's
# work phase and the median ratio of each mode against its round's base.
# From the repo root on a GPU machine, after scripts/gpucheck/prepare.sh.
set -u
cd "$(dirname "$0")/../.." || exit 1
K=$PWD/gpucheck
ROUNDS=${ROUNDS:-3}
GPU_CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
nvcc -O2 -lineinfo -arch="sm_${GPU_CC:-90}" -o /tmp/kiln-work "$K/work.cu" || exit 1
run() {
  env "$@" KILN_GPU_SOCKET=/tmp/kiln-none.sock timeout 60 /tmp/kiln-work 2000 2>/dev/null |
    grep -o 'work phase [0-9.]* ms' | grep -o '[0-9.]*'
}
INJ=(CUDA_INJECTION64_PATH="$K/libkiln_cuda.so")
declare -A ms
MODES="traced pcs100 pcs500 pcs2000"
for r in $(seq "$ROUNDS"); do
  ms[base,$r]=$(run)
  ms[traced,$r]=$(run "${INJ[@]}")
  for d in 100 500 2000; do
    ms[pcs$d,$r]=$(run "${INJ[@]}" KILN_CUDA_PC_SAMPLING=1 KILN_CUDA_PC_SAMPLING_DRAIN_MS=$d)
  done
  echo "round $r: base ${ms[base,$r]} traced ${ms[traced,$r]} pcs(read every 100/500/2000 ms) ${ms[pcs100,$r]} ${ms[pcs500,$r]} ${ms[pcs2000,$r]} ms"
done
for mode in $MODES; do
  ratios=$(for r in $(seq "$ROUNDS"); do echo "${ms[$mode,$r]} ${ms[base,$r]}"; done |
    awk '{ printf "%.3f\n", $1 / $2 }' | sort -n)
  echo "$mode: per round $(echo $ratios | tr '\n' ' ') median $(echo "$ratios" | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')x"
done
