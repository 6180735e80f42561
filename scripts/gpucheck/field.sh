#!/usr/bin/env bash
# Everything one call to a GPU machine should measure, in one go, after
# scripts/gpucheck/prepare.sh assembled ./gpucheck (run from the repo root
# on the GPU machine; results under $OUT, default ./out):
#
#   1. the kit's own check (gpucheck/device.sh: ABI, exact kernel counts,
#      timeline, Perfetto, PC sampling, PyTorch), decoded by `kiln gpu dump`;
#   2. the CUPTI constants this library added since the kit was written;
#   3. PC sampling modes in rounds: each mode's overhead against a base
#      run in the same round (median over rounds), its samples, and
#      whether it ended (a run alive after 30 s is a hang: its threads'
#      stacks are kept);
#   3b. the same work on one stream: base, traced, PC sampling, idle;
#   4. the library's host cost per launch (the kit's launch.cu, 200k empty
#      kernels from 1 and 8 threads), without and with PC sampling;
#   5. end to end with `kiln up` (eBPF agent, NVML): the kit's workload and
#      a PyTorch loop injected; their kernels under the launching stacks,
#      GPU memory by call path, the GPU metric series and the GPU view,
#      from the API; and the launch cost with the agent's probe attached.
#
# Each step has a time limit; BUDGET_S (default 480) bounds the whole.
set -u
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
K=$ROOT/gpucheck
OUT=${OUT:-$ROOT/out}
mkdir -p "$OUT"
BUDGET_S=${BUDGET_S:-480}
exec > >(tee -a "$OUT/field.log") 2>&1
left() { echo $((BUDGET_S - SECONDS)); }
section() { printf '\n#### %s (t=%ss)\n' "$1" "$SECONDS"; }
# STEPS: which of the steps below to run (default all).
STEPS=${STEPS:-1 2 3 3b 4 5}
want() { case " $STEPS " in *" $1 "*) return 0 ;; *) echo "step $1: skipped (STEPS=$STEPS)"; return 1 ;; esac; }

for f in device.sh work.cu launch.cu libkiln_cuda.so kiln snapdump; do
  [ -e "$K/$f" ] || { echo "field.sh: $K/$f is missing; run scripts/gpucheck/prepare.sh first"; exit 1; }
done
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null | head -1)
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$NVCC")")")}
export PATH="$CUDA_HOME/bin:$PATH"
GPU_CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
ARCH=sm_${GPU_CC:-90}

section "1. the kit's device check"
if want 1; then
  OUT=$OUT/device timeout 300 bash "$K/device.sh" >/dev/null 2>&1
  echo "device.sh exit $?"
  sed -n '/^== SUMMARY/,$p' "$OUT/device/device.log"
fi

section "2. CUPTI constants added since the kit"
INC=""
for d in "$CUDA_HOME/extras/CUPTI/include" "$CUDA_HOME/include" "$CUDA_HOME"/targets/*/include; do
  [ -f "$d/cupti_pcsampling.h" ] && { INC=$d; break; }
done
cat >"$OUT/abi_extra.c" <<'EOF'
#include <stddef.h>
#include <stdio.h>
#include <cupti.h>
#include <cupti_pcsampling.h>
/* cupti.h brings generated_cuda_meta.h (the driver calls' params). */
#define VAL(name, want) do { long v = (long)(name); printf("%-70s %ld %s\n", #name, v, v == (want) ? "ok" : "MISMATCH"); bad += v != (want); } while (0)
int main(void) {
  int bad = 0;
  VAL(CUPTI_API_EXIT, 1);
  VAL(CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON, 2);
  VAL(CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_HARDWARE_BUFFER_SIZE, 4);
  VAL(CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE, 5);
  VAL(CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS, 1);
  VAL(offsetof(CUpti_PCSamplingConfigurationInfo, attributeData.stallReasonData.stallReasonCount), 8);
  VAL(offsetof(CUpti_PCSamplingConfigurationInfo, attributeData.stallReasonData.pStallReasonIndex), 16);
  VAL(offsetof(CUpti_PCSamplingData, remainingNumPcs), 40);
  VAL(offsetof(CUpti_CallbackData, context), 40);
  VAL(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, 243);
  VAL(CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2, 244);
  VAL(CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, 245);
  VAL(offsetof(cuMemAlloc_v2_params, bytesize), 8);
  VAL(offsetof(cuMemAllocPitch_v2_params, Height), 24);
  VAL(CUPTI_DRIVER_TRACE_CBID_cuMemCreate, 549);
  VAL(CUPTI_DRIVER_TRACE_CBID_cuMemRelease, 550);
  VAL(offsetof(cuMemCreate_params, size), 8);
  VAL(offsetof(cuMemCreate_params, prop), 16);
  VAL(offsetof(CUmemAllocationProp, location.type), 8);
  VAL(CU_MEM_LOCATION_TYPE_DEVICE, 1);
  VAL(offsetof(cuMemRelease_params, handle), 0);
  /* Printed for the next library change (GPU memory by call path). */
#define SHOW(x) printf("%-70s %ld\n", #x, (long)(x))
  SHOW(CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged);
  SHOW(CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync);
  SHOW(CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz);
  SHOW(CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync);
  SHOW(CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz);
  SHOW(CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync);
  SHOW(CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz);
  SHOW(CUPTI_DRIVER_TRACE_CBID_cuMemMap);
  SHOW(CUPTI_DRIVER_TRACE_CBID_cuMemUnmap);
  SHOW(CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize);
  SHOW(CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize);
  SHOW(CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz);
  SHOW(sizeof(cuMemAllocAsync_params));
  SHOW(offsetof(cuMemAllocAsync_params, hStream));
  SHOW(offsetof(cuMemAllocManaged_params, flags));
  SHOW(sizeof(cuMemFreeAsync_params));
  SHOW(offsetof(cuMemMap_params, size));
  SHOW(offsetof(cuMemUnmap_params, size));
  printf("ABI EXTRA: %s\n", bad ? "FAIL" : "PASS");
  return bad;
}
EOF
if ! want 2; then
  :
elif [ -n "$INC" ] && cc -I"$INC" -I"$CUDA_HOME/include" "$OUT/abi_extra.c" -o "$OUT/abi_extra" 2>"$OUT/abi_extra.err"; then
  "$OUT/abi_extra"
else
  echo "ABI EXTRA: SKIP (could not compile against ${INC:-no CUPTI headers}: $(head -3 "$OUT/abi_extra.err" 2>/dev/null))"
fi

section "3. PC sampling modes: overhead in rounds, samples, no hang"
# Each round runs an untraced base and then every mode back to back; a
# mode's overhead is the median over rounds of its work phase against its
# round's base (the machine is shared: rounds, not single runs). idle is
# PC sampling enabled but never collecting (KILN_CUDA_PC_SAMPLING_MODE,
# gpu-lib/src/pc_sampler/mod.rs); sleep1000 wakes CUPTI's worker
# threads 10x less often; hw32 gives the hardware 32 MiB. A mode that
# hangs once is not run again. H200, 2026-11-27: traced 1.010x, pcs
# 1.089x, idle 1.063x, sleep1000 1.070x, hw32 1.078x (Start/Stop from
# launch exits, tried then, hung the program).
S=$OUT/periods
mkdir -p "$S"
nvcc -O2 -lineinfo -arch="$ARCH" -o "$S/work" "$K/work.cu" >"$S/nvcc.txt" 2>&1 || echo "nvcc work.cu failed: $(tail -2 "$S/nvcc.txt")"
# run NAME [VAR=VALUE...]: a work run; a snapshot listener when injected;
# wall ms and the work phase from its output; stacks if alive after 30 s
# (gdb backtraces for the first such run only).
run() {
  local name=$1 pid sp="" t0 t1
  shift
  if [ $# -gt 0 ]; then
    rm -f /tmp/kiln-field.sock
    "$K/snapdump" /tmp/kiln-field.sock "$S/$name.json" 1 90 >"$S/$name.dump.txt" 2>&1 &
    sp=$!
    for _ in $(seq 50); do [ -S /tmp/kiln-field.sock ] && break; sleep 0.1; done
  fi
  t0=$(date +%s%N)
  env "$@" KILN_GPU_SOCKET=/tmp/kiln-field.sock KILN_CUDA_SNAPSHOT_MS=500 "${WORK:-$S/work}" 2000 >"$S/$name.out" 2>"$S/$name.log" &
  pid=$!
  for _ in $(seq 300); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  if kill -0 $pid 2>/dev/null; then
    for t in /proc/$pid/task/*; do echo "== $t $(cat "$t/comm") $(cat "$t/wchan")"; cat "$t/stack" 2>/dev/null | head -6; done >"$S/$name.hang.txt" 2>&1
    [ -z "${GDB_DONE:-}" ] && command -v gdb >/dev/null && GDB_DONE=1 && timeout 30 gdb -batch -p $pid -ex "thread apply all bt 20" >>"$S/$name.hang.txt" 2>&1
    kill -9 $pid
    echo "$name: HUNG (stacks in periods/$name.hang.txt)"
    HUNG="$HUNG $name"
  fi
  wait $pid
  local rc=$?
  t1=$(date +%s%N)
  if [ -n "$sp" ]; then
    for _ in $(seq 100); do kill -0 $sp 2>/dev/null || break; sleep 0.1; done
    kill $sp 2>/dev/null
    wait $sp 2>/dev/null
  fi
  local samples
  samples=$(python3 -c '
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception:
    print("no summary"); sys.exit()
conns = d.get("connections", [d]) if isinstance(d, dict) else d
tot = pcs = 0; fns = {}; ctr = {}
for c in conns:
    pc = c.get("pc", {}) if isinstance(c, dict) else {}
    tot += pc.get("total_samples", 0); pcs += pc.get("distinct_pcs", 0)
    for k, v in (pc.get("by_function") or {}).items(): fns[k] = fns.get(k, 0) + (v if isinstance(v, int) else 0)
    ctr = c.get("counters", ctr)
    mem = c.get("memory", {})
keys = ("pc_drains", "pc_drains_skipped", "cupti_errors", "pc_sampling_watchdog_trips", "pc_samples_dropped_by_hw")
print(f"samples={tot} pcs={pcs} by_function={fns} " + " ".join(f"{k}={ctr.get(k)}" for k in keys)
      + f" memory: allocations={mem.get("allocations")} bytes={mem.get("allocated_bytes")} live={mem.get("live_bytes")} frees={mem.get("frees")}")
' "$S/$name.json" 2>&1)
  printf '%-12s exit=%s wall_ms=%s %s | %s\n' "$name" "$rc" $(((t1 - t0) / 1000000)) \
    "$(grep -o 'work phase [0-9.]* ms' "$S/$name.out")" "${samples:-}"
  grep -o 'work phase [0-9.]*' "$S/$name.out" | grep -o '[0-9.]*$' >"$S/$name.ms"
  grep -h '^kiln-cuda' "$S/$name.log" | sort | uniq -c | head -5 | cut -c1-220
}
INJ=(CUDA_INJECTION64_PATH="$K/libkiln_cuda.so" KILN_CUDA_LOG=info)
[ -f "$OUT/device/cupti_override" ] && INJ+=(KILN_CUPTI_PATH="$(cat "$OUT/device/cupti_override")")
PCS=KILN_CUDA_PC_SAMPLING=1
MODE=KILN_CUDA_PC_SAMPLING_MODE
declare -A MODE_ENV=(
  [traced]=""
  [pcs]="$PCS"
  [idle]="$PCS $MODE=idle"
  [sleep1000]="$PCS KILN_CUDA_PC_SAMPLING_WORKER_SLEEP_MS=1000"
  [hw32]="$PCS KILN_CUDA_PC_SAMPLING_HW_BUFFER_MB=32"
)
# rounds PREFIX MODE...: ROUNDS rounds of an untraced base run and each
# mode, then each mode's median ratio to its round's base.
rounds() {
  local prefix=$1 r m n ratios
  shift
  for r in $(seq "$ROUNDS"); do
    [ "$(left)" -gt 200 ] || { echo "round $r: skipped, $(left) s left"; break; }
    run "${prefix}base_$r"
    for m in "$@"; do
      case " $HUNG " in *" ${prefix}${m}_"*) echo "${prefix}${m}_$r: skipped, it hung before"; continue ;; esac
      # shellcheck disable=SC2086 # the mode's variables, split on purpose
      run "${prefix}${m}_$r" "${INJ[@]}" ${MODE_ENV[$m]}
    done
  done
  echo "-- overhead per mode (work phase / its round's base; median over rounds):"
  for m in "$@"; do
    ratios=$(for r in $(seq "$ROUNDS"); do
      [ -s "$S/${prefix}${m}_$r.ms" ] && [ -s "$S/${prefix}base_$r.ms" ] &&
        echo "$(cat "$S/${prefix}${m}_$r.ms") $(cat "$S/${prefix}base_$r.ms")"
    done | awk '{ printf "%.3f\n", $1 / $2 }' | sort -n)
    n=$(echo "$ratios" | grep -c .)
    [ "$n" -gt 0 ] || { printf '%-12s rounds=0\n' "$prefix$m"; continue; }
    printf '%-12s rounds=%s per-round=%s median=%sx\n' "$prefix$m" "$n" "$(echo $ratios | tr ' ' ',')" \
      "$(echo "$ratios" | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')"
  done
  [ -z "$HUNG" ] || echo "HUNG: $HUNG"
}
ROUNDS=${ROUNDS:-3}
HUNG=""
# shellcheck disable=SC2086 # the list of modes, split on purpose
want 3 && rounds "" ${PCS_MODES:-traced pcs idle sleep1000 hw32}

section "3b. one stream: the same work with both threads launching into one stream"
# On an H200 the kernels' own durations were the same with PC sampling
# enabled as without, but kernels of the workload's two streams overlapped
# less (879 against 1,515 ms of overlap over a 3 s run): the cost is lost
# cross-stream concurrency. On one stream (H200, 2026-11-27): traced,
# pcs and idle all 1.000x, with 1.07 M samples per run.
if want 3b; then
  sed 's/path_b(w, sb, iters, cb);/path_b(w, sa, iters, cb);/; s/cudaStreamSynchronize(sb)/cudaStreamSynchronize(sa)/' \
    "$K/work.cu" >"$S/work1.cu"
  if nvcc -O2 -lineinfo -arch="$ARCH" -o "$S/work1" "$S/work1.cu" >"$S/nvcc1.txt" 2>&1; then
    WORK=$S/work1 rounds one_ traced pcs idle
  else
    echo "work1.cu did not build: $(tail -2 "$S/nvcc1.txt")"
  fi
fi

section "4. host cost per launch (200k empty kernels)"
if ! want 4; then
  :
elif [ "$(left)" -gt 120 ] && nvcc -O2 -arch="$ARCH" -o "$OUT/launch" "$K/launch.cu" >"$OUT/launch_nvcc.txt" 2>&1; then
  for t in 1 8; do
    for r in 1 2 3; do
      echo "t=$t base      $(timeout 60 "$OUT/launch" 200000 $t)"
      echo "t=$t kiln      $(CUDA_INJECTION64_PATH=$K/libkiln_cuda.so KILN_GPU_SOCKET=/tmp/none.sock timeout 60 "$OUT/launch" 200000 $t 2>/dev/null)"
      echo "t=$t kiln+pcs  $(CUDA_INJECTION64_PATH=$K/libkiln_cuda.so KILN_GPU_SOCKET=/tmp/none.sock KILN_CUDA_PC_SAMPLING=1 timeout 60 "$OUT/launch" 200000 $t 2>/dev/null)"
    done
  done | tee "$OUT/launch.txt"
else
  echo "skipped (time, or launch.cu did not build: $(tail -2 "$OUT/launch_nvcc.txt" 2>/dev/null))"
fi

section "5. end to end: kiln up (eBPF agent, NVML), the workload and PyTorch injected"
E=$OUT/e2e
mkdir -p "$E" /run/kiln
if ! want 5; then
  :
elif [ "$(left)" -gt 90 ]; then
  "$K/kiln" up --listen 127.0.0.1:7070 --data-dir /tmp/kiln-field-data >"$E/kiln.log" 2>&1 &
  kp=$!
  for _ in $(seq 60); do curl -s -o /dev/null http://127.0.0.1:7070/healthz && break; sleep 0.5; done
  sleep 4
  t0=$(date +%s)
  # PC sampling on, so that the GPU view's SASS table has real samples.
  CUDA_INJECTION64_PATH=$K/libkiln_cuda.so KILN_CUDA_SNAPSHOT_MS=1000 KILN_CUDA_PC_SAMPLING=1 \
    timeout 60 "$S/work" 2000 >"$E/work.out" 2>"$E/work.log"
  echo "work exit $?; launches printed by the workload: $(grep -o '"launches":{[^}]*}' "$E/work.out" | head -1)"
  CUDA_INJECTION64_PATH=$K/libkiln_cuda.so KILN_CUDA_SNAPSHOT_MS=1000 timeout 90 python3 - >"$E/torch.out" 2>&1 <<'PY'
import torch
def allocate_weights():
    return [torch.randn(2048, 2048, device="cuda") for _ in range(8)]
def train_step(ws, x):
    for w in ws:
        x = torch.relu(x @ w)
        x = x / (x.norm() + 1)
    return x
ws = allocate_weights()
x = torch.randn(2048, 2048, device="cuda")
for _ in range(50):
    x = train_step(ws, x)
torch.cuda.synchronize(); print("torch done")
PY
  echo "torch: $(tail -1 "$E/torch.out")"
  # The agent's launch probe fires on every launch, on the launching
  # thread: its cost, against untraced launches in the same rounds.
  [ -x "$OUT/launch" ] || nvcc -O2 -arch="$ARCH" -o "$OUT/launch" "$K/launch.cu" >"$OUT/launch_nvcc.txt" 2>&1
  echo "-- launch cost with kiln up's agent probing every launch (200k empty kernels):"
  for t in 1 8; do
    for r in 1 2 3; do
      echo "t=$t base        $(timeout 60 "$OUT/launch" 200000 $t)"
      echo "t=$t kiln+agent  $(CUDA_INJECTION64_PATH=$K/libkiln_cuda.so KILN_CUDA_SNAPSHOT_MS=1000 timeout 60 "$OUT/launch" 200000 $t 2>/dev/null)"
    done
  done | tee "$E/launch_agent.txt"
  sleep 12
  Q="from=$((t0 - 5))&to=$(($(date +%s) + 5))"
  # Every /api/ request needs a key: kiln up keeps its own in its data directory.
  auth="Authorization: Bearer $(cat /tmp/kiln-field-data/api-key)"
  api() { curl -s -H "$auth" "http://127.0.0.1:7070/api/v1/$1" >"$E/$2"; }
  api "flamegraph?$Q&format=collapsed&gpu_weight=nanoseconds" kernels.collapsed
  api "flamegraph?$Q&format=collapsed&gpu_weight=allocated_bytes" allocated.collapsed
  api "flamegraph?$Q&format=collapsed&gpu_weight=live_bytes" live.collapsed
  api "metrics/names?$Q" metric_names.json
  api "metrics?$Q&name=gpu.utilization_percent" gpu_util.json
  api "metrics?$Q&name=gpu.process_peak_live_bytes" peak.json
  api "gpu/kernels?$Q" gpu_kernels.json
  fma=$(python3 -c 'import json,sys; print(next((k["name"] for k in json.load(open(sys.argv[1])).get("kernels", []) if "kiln_fma" in k["name"]), ""))' "$E/gpu_kernels.json" 2>/dev/null)
  api "gpu/instructions?$Q&kernel=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$fma")" gpu_fma_sass.json
  kill $kp; wait $kp 2>/dev/null
  echo "kernel stacks: $(wc -l <"$E/kernels.collapsed"); under main/path_a/path_b: $(grep -c 'path_a\|path_b' "$E/kernels.collapsed"); torch kernels under train_step: $(grep -c 'train_step' "$E/kernels.collapsed")"
  # Every launch of the workload is under main (path_a, path_b, or the
  # calibration); a kernel whose exemplars had no stack roots elsewhere.
  # launch.cu's (kiln_empty) run from main or its threads' lambda.
  awk '/kiln_(triad|fma|smem|scale)/ { n = $NF; all += n; if ($0 ~ /(^|;)main;|path_b/) under += n }
       /kiln_empty/ { n = $NF; eall += n; if ($0 ~ /main/) eunder += n }
       END { if (all) printf "work kernel time under its launching code: %.2f%% of %.3f s\n", 100 * under / all, all / 1e9
             if (eall) printf "launch.cu kernel time under its launching code: %.2f%% of %.3f s\n", 100 * eunder / eall, eall / 1e9 }' "$E/kernels.collapsed"
  echo "-- GPU memory allocated by call path (top 6):"
  sort -t' ' -k2 -n -r "$E/allocated.collapsed" | head -6 | sed -E 's/^(.{0,80}).*;([^;]*;[^;]*;[^;]*) ([0-9]+)$/\1 ... \2 \3/' | cut -c1-400
  echo "-- GPU memory live (top 3):"
  sort -t' ' -k2 -n -r "$E/live.collapsed" | head -3 | cut -c1-300
  echo "-- metric names: $(cut -c1-600 "$E/metric_names.json")"
  echo "-- gpu.utilization_percent: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); s=d.get("series", d if isinstance(d, list) else []); print(len(s), "series;", [ (x.get("labels"), len(x.get("points", [])), max([p[1] if isinstance(p, list) else p.get("value", 0) for p in x.get("points", [])] or [0])) for x in s][:2])' "$E/gpu_util.json" 2>&1 | cut -c1-500)"
  echo "-- peak live bytes: $(cut -c1-400 "$E/peak.json")"
  echo "-- GPU view, kernels (name, launches, mean us, share, PC samples):"
  python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
for k in d.get("kernels", [])[:8]:
    print("  ", (k.get("demangled") or k["name"])[:70], k.get("launches"), round(k.get("mean_ns", 0) / 1e3, 1), round(k.get("gpu_time_share", 0), 3), k.get("pc_samples"))
' "$E/gpu_kernels.json" 2>&1 | head -9
  echo "-- GPU view, kiln_fma SASS (first rows): $(head -c 700 "$E/gpu_fma_sass.json")"
  grep -i "nvml\|gpu metrics" "$E/kiln.log" | head -3 | cut -c1-300
  echo "-- kiln up's warnings and errors:"
  grep -i " warn\| error" "$E/kiln.log" | head -8 | cut -c1-300
else
  echo "skipped: $(left) s left"
fi
rm -rf "$OUT/e2e/bin" "$OUT/device/bin" "$OUT/launch" "$S/work" "$OUT/abi_extra"
tar czf /tmp/field-all.tgz -C "$OUT" --exclude=field-all.tgz . 2>/dev/null && mv /tmp/field-all.tgz "$OUT/field-all.tgz"
echo
echo "field.sh done in ${SECONDS}s"
