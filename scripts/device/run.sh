#!/usr/bin/env bash
# Runs on the GPU machine (through the device tool), from the repository root, with
# device-dist/ carried: every GPU test and GPU benchmark, results under $OUT.
#   device tool: run  command="bash scripts/device/run.sh"  carry=["device-dist"]
# Writes $OUT/summary.txt (figures and pass/fail lines), gpu_tests.log, benchmarks.log, one
# <bench>.json per benchmark (3), server.log, reload_bench.json and pytorch_bench.json: at most 8
# files come back, so keep it to these (when every step runs, gpu_tests.log is folded into
# benchmarks.log at the end to stay at 8).
# Later issues add their steps here. STEPS (default "tests benches server reload pytorch"; also
# "pytorch_diag" and "soak") picks
# steps, e.g. STEPS="pytorch"; the reload step alone still measures the pinned H2D rate
# (h2d_bench) it compares against.
set -uo pipefail
STEPS="${STEPS:-tests benches server reload pytorch}"
has_step() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }
# cuBLAS (the mlp backend's GPU path) is too large to carry in device-dist: use the machine's, from
# torch's pip wheel (nvidia.cublas, or nvidia.cu13 for CUDA 13 wheels; either may be a namespace
# package with __path__ and no __file__), else the CUDA toolkit's lib64.
cublas_lib="$(python3 -c 'import importlib, os
for n in ("nvidia.cublas", "nvidia.cu13"):
    try: m = importlib.import_module(n)
    except ImportError: continue
    for p in list(getattr(m, "__path__", None) or [os.path.dirname(m.__file__)]):
        d = os.path.join(p, "lib")
        if os.path.isdir(d) and any(f.startswith("libcublas.so") for f in os.listdir(d)): print(d); raise SystemExit' 2>/dev/null)"
export LD_LIBRARY_PATH="${cublas_lib:+$cublas_lib:}/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/vramd-device-out}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/device-dist/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
BIN=device-dist/bin
summary="$OUT/summary.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
# One check script of a step: at most LIMIT seconds, its output in $OUT/LOG, its PASS, FAIL and
# FIGURE lines in the summary, and a line saying how it ended.
#   run_check LOG "what it checks" LIMIT command...
run_check() {
  local log="$1" what="$2" limit="$3" rc
  shift 3
  timeout "$limit" "$@" > "$OUT/$log" 2>&1
  rc=$?
  grep -E '^(PASS|FAIL|FIGURE)' "$OUT/$log" >> "$summary"
  [ "$rc" -eq 0 ] && say "PASS $what" || { say "FAIL $what (exit $rc)"; status=1; }
}

say "# vramd device run $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$summary"

# Programs built here link this machine's libstdc++; device-dist/lib carries the build host's.
# Puts whichever is newer first (links under $1), so a backend built here (loaded into vramd) and
# torch both find theirs.
prefer_newer_stdcxx() {
  local sys_stdcxx s_ver d_ver sys_gcc_s
  sys_stdcxx=$(c++ -print-file-name=libstdc++.so.6 2>/dev/null)
  [ -f "$sys_stdcxx" ] || sys_stdcxx=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/{print $NF; exit}')
  glibcxx_max() { grep -ao 'GLIBCXX_3\.4\.[0-9]*' "$1" 2>/dev/null | sort -uV | tail -1; }
  if [ -n "$sys_stdcxx" ] && [ -f "$sys_stdcxx" ] && [ -f device-dist/lib/libstdc++.so.6 ]; then
    s_ver=$(glibcxx_max "$sys_stdcxx"); d_ver=$(glibcxx_max device-dist/lib/libstdc++.so.6)
    if [ -n "$s_ver" ] && [ "$s_ver" != "$d_ver" ] && \
       [ "$(printf '%s\n%s\n' "$s_ver" "$d_ver" | sort -V | tail -1)" = "$s_ver" ]; then
      mkdir -p "$1/stdcxx"
      ln -sf "$(readlink -f "$sys_stdcxx")" "$1/stdcxx/libstdc++.so.6"
      sys_gcc_s=$(c++ -print-file-name=libgcc_s.so.1 2>/dev/null)
      [ -f "$sys_gcc_s" ] && ln -sf "$(readlink -f "$sys_gcc_s")" "$1/stdcxx/libgcc_s.so.1"
      echo "using this machine's libstdc++ ($s_ver) before device-dist's ($d_ver)" >> "$OUT/benchmarks.log"
      export LD_LIBRARY_PATH="$1/stdcxx:$LD_LIBRARY_PATH"
    fi
  fi
}

status=0
# 1. GPU tests and unit tests with a GPU part (GoogleTest). GPU tests print
#    "FIGURE <name> <value> <unit>" lines for the record.
for t in "$BIN"/*_test; do
  has_step tests || break
  [ -x "$t" ] || continue
  name=$(basename "$t")
  if "$t" --gtest_color=no > "$OUT/tmp.log" 2>&1; then say "PASS $name"; else say "FAIL $name"; status=1; fi
  cat "$OUT/tmp.log" >> "$OUT/gpu_tests.log"; rm -f "$OUT/tmp.log"
done
# The unit tests with a GPU part (CUDA segments, the pool on a device, NVML); the others need the
# source tree's test backends and run in CI.
if has_step tests && [ -x "$BIN/vramd_unit_tests" ]; then
  if "$BIN/vramd_unit_tests" --gtest_color=no \
       --gtest_filter='CachingPool*:CudaSegmentSource*:HostSegmentSource*:Nvml*' > "$OUT/tmp.log" 2>&1; then
    say "PASS vramd_unit_tests (GPU parts)"
  else
    say "FAIL vramd_unit_tests (GPU parts)"; status=1
  fi
  cat "$OUT/tmp.log" >> "$OUT/gpu_tests.log"; rm -f "$OUT/tmp.log"
fi
grep -h '^FIGURE ' "$OUT/gpu_tests.log" 2>/dev/null | tee -a "$summary"

# 2. Benchmarks (Google Benchmark), one JSON file each, with a short table in the summary.
for b in "$BIN"/*_bench; do
  [ -x "$b" ] || continue
  has_step benches || { has_step reload && [ "$(basename "$b")" = h2d_bench ]; } || continue
  name=$(basename "$b")
  "$b" --benchmark_min_time=0.2 --benchmark_out="$OUT/$name.json" --benchmark_out_format=json \
    > "$OUT/tmp.txt" 2>&1 || { say "FAIL $name"; status=1; }
  cat "$OUT/tmp.txt" >> "$OUT/benchmarks.log"
  grep -E '^BM_' "$OUT/tmp.txt" | sed "s/^/$name: /" | tee -a "$summary"; rm -f "$OUT/tmp.txt"
done

grep -h '^h2d_' "$OUT/benchmarks.log" | tee -a "$summary"
pinned_gbps=$(grep -ho 'h2d_pinned_gbps=[0-9.]*' "$OUT/benchmarks.log" | tail -1 | cut -d= -f2)

# Ratios against the baselines of the same run, and the issue's targets.
if has_step benches; then
python3 bench/memory_ratios.py "$OUT/memory_pool_bench.json" "$OUT/ledger_bench.json" \
  | tee -a "$summary" || { say "FAIL memory targets"; status=1; }
fi

if has_step server; then
# 3. The server on the GPU: examples/models plus a 256 MiB mlp with KIND_GPU instances; call it
#    over HTTP and compare with numpy, read /v2/memory through vramctl and /metrics, stop it.
gpu_repo=$(mktemp -d)
python3 scripts/make_mlp_model.py model "$gpu_repo/mlp_gpu" --inputs 256 --target-bytes 256MiB \
  --outputs 16 --kind gpu --instances 2 --max-batch-size 8 --name mlp_gpu >/dev/null
python3 scripts/make_mlp_model.py reference "$gpu_repo/mlp_gpu" "$gpu_repo/ref.json" --batch 4
"$BIN"/vramd serve --model-repository examples/models --model-repository "$gpu_repo" \
  --http-port 18000 --metrics-port 18002 --grpc-port 18001 > "$OUT/server.log" 2>&1 &
pid=$!
for _ in $(seq 50); do curl -sf localhost:18000/v2/health/live >/dev/null 2>&1 && break; sleep 0.2; done
python3 - "$gpu_repo/ref.json" <<'PY' | tee -a "$summary" || status=1
import json, sys, urllib.request
ref = json.load(open(sys.argv[1]))
body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [len(ref["input"]), len(ref["input"][0])],
                    "data": [x for row in ref["input"] for x in row]}]}
req = urllib.request.Request("http://localhost:18000/v2/models/mlp_gpu/infer", json.dumps(body).encode())
out = json.load(urllib.request.urlopen(req, timeout=60))["outputs"][0]["data"]
want = [x for row in ref["output"] for x in row]
err = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(out, want))
print("FIGURE mlp_gpu_http_max_rel_err_vs_numpy %.3g ratio" % err)
print(("PASS" if err < 1e-3 else "FAIL") + " mlp_gpu over HTTP matches numpy")
sys.exit(0 if err < 1e-3 else 1)
PY
"$BIN"/vramctl memory --url http://localhost:18000 >> "$OUT/server.log" 2>&1 && say "PASS vramctl memory" || { say "FAIL vramctl memory"; status=1; }
curl -s localhost:18002/metrics | grep -E '^vramd_|^nv_' | grep -v ' 0$' | head -60 >> "$OUT/server.log"
kill -TERM "$pid"; wait "$pid"; say "server exit code $?"
fi

# 4. Hot reload on the GPU (issue 5): RELOAD_CYCLES (default 100) reloads of a >= 1 GiB mlp under
#    client load, NVML drift, the reload's phases and its h2d rate against the pinned rate above.
#    RELOAD_GPUS (default 0; "0,1" on a two-GPU machine, issue 19) places an instance on each
#    listed GPU: every GPU's figures must hold, and the d2d phase's rate is printed.
if ! has_step reload; then
  :
elif [ -n "$pinned_gbps" ]; then
  python3 bench/reload_bench.py --vramd "$BIN"/vramd --pinned-gbps "$pinned_gbps" \
    --cycles "${RELOAD_CYCLES:-100}" --target-bytes "${RELOAD_BYTES:-1GiB}" \
    --gpus "${RELOAD_GPUS:-0}" \
    --out "$OUT/reload_bench.json" --server-log "$OUT/reload_server.tmp" > "$OUT/reload.tmp" 2>&1 \
    || status=1
  grep -E '^(PASS|FAIL|FIGURE) ' "$OUT/reload.tmp" | tee -a "$summary"
  grep -E '"(phase_median_seconds|reload_median_seconds|h2d_median_gbps|nvml_|requests_)' -A9 \
    "$OUT/reload.tmp" | head -40 >> "$summary"
  { echo "# reload_bench server log (tail)"; tail -40 "$OUT/reload_server.tmp"; } >> "$OUT/server.log"
  rm -f "$OUT/reload.tmp" "$OUT/reload_server.tmp"
else
  say "FAIL reload bench: no pinned H2D rate from h2d_bench"; status=1
fi
# 5. The pytorch backend (issue 6): build it and bench/torch's direct_bench here against the torch
#    wheel's LibTorch (scripts/device/build_torch.sh), then (A) device memory of 1..16 instances
#    of one TorchScript model in vramd vs one python process per instance vs threads in one
#    process, and (B) req/s at concurrency 1..32 of vramd over HTTP vs calling the module from
#    C++ directly. Numbers in $OUT/pytorch_bench.json; logs folded into benchmarks.log and
#    server.log. PYTORCH_MEM_ARGS / PYTORCH_TPUT_ARGS add arguments to the two scripts;
#    PYTORCH_{BUILD,MEM,TPUT}_TIMEOUT (200, 240, 150 s) bound the parts, under 10 minutes in all
#    (typically about 5). Each script writes its JSON as it goes, so a cut-short run keeps what
#    it measured. PYTORCH_PARTS (default "check mem tput") picks the parts after the build.
if has_step pytorch; then
  pparts=" ${PYTORCH_PARTS:-check mem tput} "
  ptmp=$(mktemp -d)
  prefer_newer_stdcxx "$ptmp"
  echo "# pytorch: build_torch.sh" >> "$OUT/benchmarks.log"
  if timeout "${PYTORCH_BUILD_TIMEOUT:-200}" bash scripts/device/build_torch.sh >> "$OUT/benchmarks.log" 2>&1; then
    say "PASS pytorch build (backend + direct_bench)"
    # What CI cannot check without a GPU: KIND_GPU answers vs torch's, weights in the ledger on
    # cuda:0, forward() exceptions, load/unload cycles without NVML growth.
    if [[ "$pparts" == *" check "* ]]; then
      timeout 180 python3 tests/device/pytorch_gpu_check.py --vramd "$BIN"/vramd \
        --backend-directory build-torch-device/backends --log "$ptmp/check_server.log" \
        > "$ptmp/check.out" 2>&1
      rc=$?
      grep -E '^(PASS|FAIL|FIGURE) ' "$ptmp/check.out" | tee -a "$summary"
      [ "$rc" -eq 0 ] || { say "FAIL pytorch GPU check (exit $rc)"; tail -40 "$ptmp/check.out" >> "$OUT/benchmarks.log"; status=1; }
    fi
    # A: memory (and the ledger's coverage of NVML's figure). Bounded so that B still runs in
    # the step's budget.
    if [[ "$pparts" == *" mem "* ]]; then
      timeout "${PYTORCH_MEM_TIMEOUT:-240}" python3 bench/torch/memory_compare.py --vramd "$BIN"/vramd \
        --infer-load "$BIN"/infer_load --backend-dir build-torch-device/backends --work "$ptmp/mem" \
        --out "$OUT/pytorch_bench.json" --server-log "$ptmp/server.log" \
        --worker-log "$ptmp/workers.log" ${PYTORCH_MEM_ARGS:-} > "$ptmp/mem.out" 2> "$ptmp/mem.err"
      rc=$?
      grep -E '^(PASS|FAIL|FIGURE|#) ' "$ptmp/mem.out" | tee -a "$summary"
      [ "$rc" -eq 0 ] || { say "FAIL pytorch memory comparison (exit $rc)"; status=1; }
    fi
    # B: throughput.
    if [[ "$pparts" == *" tput "* ]]; then
      timeout "${PYTORCH_TPUT_TIMEOUT:-150}" python3 bench/torch/throughput_compare.py --vramd "$BIN"/vramd \
        --infer-load "$BIN"/infer_load --direct-bench build-torch-bench/direct_bench \
        --backend-dir build-torch-device/backends --work "$ptmp/tput" --out "$OUT/pytorch_bench.json" \
        --server-log "$ptmp/server.log" ${PYTORCH_TPUT_ARGS:-} > "$ptmp/tput.out" 2> "$ptmp/tput.err"
      rc=$?
      grep -E '^(PASS|FAIL|FIGURE|#) ' "$ptmp/tput.out" | tee -a "$summary"
      [ "$rc" -eq 0 ] || { say "FAIL pytorch throughput comparison (exit $rc)"; status=1; }
    fi
  else
    say "FAIL pytorch build (scripts/device/build_torch.sh; log in benchmarks.log)"; status=1
  fi
  for f in mem.err tput.err workers.log; do
    [ -s "$ptmp/$f" ] && { echo "# pytorch: $f (tail)"; tail -150 "$ptmp/$f"; } >> "$OUT/benchmarks.log"
  done
  [ -s "$ptmp/check_server.log" ] && { echo "# pytorch: GPU check's vramd log (tail)"; tail -60 "$ptmp/check_server.log"; } >> "$OUT/server.log"
  [ -s "$ptmp/server.log" ] && { echo "# pytorch: vramd server log (tail)"; tail -300 "$ptmp/server.log"; } >> "$OUT/server.log"
  rm -rf "$ptmp"
fi

# 6. pytorch_diag (not in the default STEPS): where a TorchScript request's time goes, for the
#    throughput gap against direct calls (docs/benchmarks.md): the same model over HTTP
#    (infer_load, with the backend's VRAMD_PYTORCH_PROFILE timings), through the runtime without
#    HTTP (inprocess_infer) and by direct LibTorch calls (direct_bench), at DIAG_CONCURRENCY.
if has_step pytorch_diag; then
  if [ -x build-torch-device/backends/pytorch/libvramd_pytorch.so ] && [ -x build-torch-bench/direct_bench ] \
     || bash scripts/device/build_torch.sh >> "$OUT/benchmarks.log" 2>&1; then
    # vramd over HTTP (with and without the operator table), the runtime without HTTP, and
    # direct calls: plain, doing what the backend's Execute does, sleeping between iterations
    # as a server thread does between requests, with vramd's cuBLAS workspace setting, and with
    # the operator table. Every one profiles forward() the same way (forward_probe.h).
    CONCURRENCY="${DIAG_CONCURRENCY:-1 8 16}" INSTANCES="${DIAG_INSTANCES:-16}" \
    VARIANTS="${DIAG_VARIANTS:-ledger ops:VRAMD_PYTORCH_OP_STATS=1}" \
    INPROCESS_VARIANTS="${DIAG_INPROCESS_VARIANTS:-default:VRAMD_PYTORCH_PROFILE=1}" OPS_TABLE="${DIAG_OPS_TABLE:-3}" \
    DIRECT_VARIANTS="${DIAG_DIRECT_VARIANTS:-default:--profile like_server:--server-like,--profile idle:--idle-us=50,--profile ws0:CUBLAS_WORKSPACE_CONFIG=:0:0,--profile ops:--op-stats}" \
      timeout "${PYTORCH_DIAG_TIMEOUT:-420}" bash bench/torch/diagnose.sh "$BIN"/vramd "$BIN"/infer_load \
      build-torch-device/backends build-torch-bench/direct_bench gpu "$(mktemp -d)" 2>&1 \
      | tee -a "$OUT/benchmarks.log" | grep -v '^  owner' | cut -c1-700 | tee -a "$summary"
  else
    say "FAIL pytorch_diag: build_torch.sh failed (log in benchmarks.log)"; status=1
  fi
fi

# 8. python (issue 14; not in the default STEPS): the python backend built here against this
#    machine's Python 3.12 and torch venv (scripts/device/build_python.sh), the pytorch backend
#    beside it (build_torch.sh), then: tests/device/python_gpu_check.py (torch allocations of a
#    model.py in the ledger), bench/torch/memory_compare.py's python series (a torch model.py at
#    N = 1, 2, 4, 8 instances in each hosting mode, plus N python processes as Triton's
#    baseline), and bench/python/throughput_compare.py (python identity vs the built-in one;
#    a torch model.py vs the same TorchScript through the pytorch backend). JSON in
#    $OUT/python_bench.json (PYTHON_TPUT_TORCH=0: the identity round alone). The embedded
#    interpreter is the system's 3.12: the venv's site-packages (torch) reach it through
#    PYTHONPATH.
if has_step python; then
  pytmp=$(mktemp -d)
  prefer_newer_stdcxx "$pytmp"
  echo "# python: build_python.sh" >> "$OUT/benchmarks.log"
  built=1
  parts=" ${PYTHON_PARTS:-check mem tput} "  # which parts to run (loadloop too, below)
  timeout "${PYTHON_BUILD_TIMEOUT:-200}" bash scripts/device/build_python.sh >> "$OUT/benchmarks.log" 2>&1 || built=0
  # The pytorch backend is for the comparisons (mem, tput) only.
  if [[ "$parts" == *" mem "* || "$parts" == *" tput "* ]] && [ ! -f build-torch-device/backends/pytorch/libvramd_pytorch.so ]; then
    echo "# python: build_torch.sh" >> "$OUT/benchmarks.log"
    timeout "${PYTORCH_BUILD_TIMEOUT:-200}" bash scripts/device/build_torch.sh >> "$OUT/benchmarks.log" 2>&1 || built=0
  fi
  if [ "$built" = 1 ]; then
    say "PASS python build (python backend + pytorch backend)"
    mkdir -p "$pytmp/backends"
    ln -s "$PWD/build-python-device/backends/python" "$pytmp/backends/python"
    [ -d build-torch-device/backends/pytorch ] && ln -s "$PWD/build-torch-device/backends/pytorch" "$pytmp/backends/pytorch"
    export VRAMD_BACKEND_HOST="$PWD/$BIN/vramd_backend_host"
    PYTHONPATH="$(python3 -c 'import site; print(":".join(site.getsitepackages()))')${PYTHONPATH:+:$PYTHONPATH}"
    export PYTHONPATH
    if [[ "$parts" == *" check "* ]] && [ -f tests/device/python_gpu_check.py ]; then
      timeout "${PYTHON_CHECK_TIMEOUT:-150}" python3 tests/device/python_gpu_check.py --vramd "$BIN"/vramd \
        --backend-directory "$pytmp/backends" --log "$pytmp/check_server.log" > "$pytmp/check.out" 2>&1
      rc=$?
      grep -E '^(PASS|FAIL|FIGURE) ' "$pytmp/check.out" | tee -a "$summary"
      [ "$rc" -eq 0 ] || { say "FAIL python GPU check (exit $rc)"; tail -40 "$pytmp/check.out" >> "$OUT/benchmarks.log"; status=1; }
    fi
    # inplace (not in the default parts; issue 17): a torch model.py asleep in place under
    # --device-pool=vmm (tests/device/sleep_in_place_gpu_check.py; INPLACE_SIZES).
    if [[ "$parts" == *" inplace "* ]]; then
      timeout "${INPLACE_TIMEOUT:-300}" python3 tests/device/sleep_in_place_gpu_check.py --vramd "$BIN"/vramd \
        --backend-directory "$pytmp/backends" --sizes "${INPLACE_SIZES:-1GiB,4GiB}" \
        --log "$pytmp/inplace_server.log" > "$pytmp/inplace.out" 2>&1
      rc=$?
      grep -E '^(PASS|FAIL|FIGURE) ' "$pytmp/inplace.out" | tee -a "$summary"
      [ "$rc" -eq 0 ] || { say "FAIL sleep in place GPU check (exit $rc)"; tail -40 "$pytmp/inplace.out" >> "$OUT/benchmarks.log";
                           tail -60 "$pytmp/inplace_server.log" >> "$OUT/server.log"; status=1; }
    fi
    # loadloop (not in the default parts): start the server on the torch model.py again and
    # again, counting crashes at load and keeping their reports (tests/device/python_load_loop.py).
    if [[ "$parts" == *" loadloop "* ]]; then
      timeout "${PYTHON_LOOP_TIMEOUT:-240}" python3 tests/device/python_load_loop.py --vramd "$BIN"/vramd \
        --backend-dir "$pytmp/backends" --starts "${PYTHON_LOOP_STARTS:-6}" --work "$pytmp/loop" \
        --out "$OUT/python_load_crashes.txt" ${PYTHON_LOOP_ARGS:-} > "$pytmp/loop.out" 2>&1
      rc=$?
      grep -E '^(PASS|FAIL|FIGURE) ' "$pytmp/loop.out" | tee -a "$summary"
      [ "$rc" -eq 0 ] || { say "FAIL python load loop (exit $rc)"; tail -60 "$pytmp/loop.out" >> "$OUT/benchmarks.log"; status=1; }
    fi
    # poolcost (not in the default parts): bench/python/torch_pool_cost.py, torch alone (no
    # server): what a stream and a MemPool per thread cost 8 threads' forwards and memory.
    [[ "$parts" == *" poolcost "* ]] && { timeout "${PYTHON_POOLCOST_TIMEOUT:-200}" python3 bench/python/torch_pool_cost.py \
      --out "$OUT/torch_pool_cost.json" --work "$pytmp/poolcost" ${PYTHON_POOLCOST_ARGS:-} > "$pytmp/poolcost.out" 2>&1
    rc=$?
    grep -E '^(PASS|FAIL|FIGURE|#|!!!) ' "$pytmp/poolcost.out" | tee -a "$summary"
    [ "$rc" -eq 0 ] || { say "FAIL torch pool cost (exit $rc)"; tail -40 "$pytmp/poolcost.out" >> "$OUT/benchmarks.log"; status=1; }; }
    [[ "$parts" == *" mem "* ]] && { timeout "${PYTHON_MEM_TIMEOUT:-300}" python3 bench/torch/memory_compare.py --vramd "$BIN"/vramd \
      --infer-load "$BIN"/infer_load --backend-dir "$pytmp/backends" --python-backend-dir "$pytmp/backends" \
      --skip "${PYTHON_MEM_SKIP:-vramd,threads}" --counts "${PYTHON_MEM_COUNTS:-1,2,4,8}" \
      --width "${PYTHON_MEM_WIDTH:-32}" --work "$pytmp/mem" --out "$OUT/python_bench.json" \
      --server-log "$pytmp/server.log" --worker-log "$pytmp/workers.log" ${PYTHON_MEM_ARGS:-} \
      > "$pytmp/mem.out" 2> "$pytmp/mem.err"
    rc=$?
    grep -E '^(PASS|FAIL|FIGURE|#|!!!) ' "$pytmp/mem.out" | tee -a "$summary"
    [ "$rc" -eq 0 ] || { say "FAIL python memory comparison (exit $rc)"; status=1; }; }
    [[ "$parts" == *" tput "* ]] && { timeout "${PYTHON_TPUT_TIMEOUT:-200}" python3 bench/python/throughput_compare.py --vramd "$BIN"/vramd \
      --infer-load "$BIN"/infer_load --backend-dir "$pytmp/backends" $( [ "${PYTHON_TPUT_TORCH:-1}" = 0 ] || echo --torch ) \
      --torch-instances "${PYTHON_TPUT_INSTANCES:-8}" --work "$pytmp/tput" --out "$OUT/python_bench.json" \
      --server-log "$pytmp/server.log" ${PYTHON_TPUT_ARGS:-} > "$pytmp/tput.out" 2> "$pytmp/tput.err"
    rc=$?
    grep -E '^(PASS|FAIL|FIGURE|#) ' "$pytmp/tput.out" | tee -a "$summary"
    [ "$rc" -eq 0 ] || { say "FAIL python throughput comparison (exit $rc)"; status=1; }; }
  else
    say "FAIL python build (scripts/device/build_python.sh or build_torch.sh; log in benchmarks.log)"; status=1
  fi
  for f in check.out mem.err tput.err workers.log; do
    [ -s "$pytmp/$f" ] && { echo "# python: $f (tail)"; tail -150 "$pytmp/$f"; } >> "$OUT/benchmarks.log"
  done
  [ -s "$pytmp/check_server.log" ] && { echo "# python: GPU check's vramd log (tail)"; tail -80 "$pytmp/check_server.log"; } >> "$OUT/server.log"
  [ -s "$pytmp/server.log" ] && { echo "# python: vramd server log (tail)"; tail -300 "$pytmp/server.log"; } >> "$OUT/server.log"
  rm -rf "$pytmp"
fi

# 7. soak (not in the default STEPS; issue 12): bench/soak.py on a KIND_GPU mlp at saturation,
#    a reload a minute, bad requests mixed in, RSS/fds/threads and NVML's per-process figure
#    every 10 s, each flat within 1% after warm-up. SOAK_SECONDS (default 480: one call may run
#    600 s) and SOAK_WARMUP (120); the hour of the record runs where there is time for it.
if has_step soak; then
  soak_repo=$(mktemp -d)
  python3 scripts/make_mlp_model.py model "$soak_repo/models/mlp_gpu" --inputs 256 --target-bytes 256MiB \
    --outputs 16 --kind gpu --instances 2 --max-batch-size 8 --name mlp_gpu >/dev/null
  python3 - "$soak_repo/body.json" <<'PY'
import json, sys
json.dump({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4, 256],
                       "data": [((i * 37) % 101) / 101.0 for i in range(4 * 256)]}]},
          open(sys.argv[1], "w"))
PY
  timeout $(( ${SOAK_SECONDS:-480} + 100 )) python3 bench/soak.py --vramd "$BIN"/vramd \
    --infer-load "$BIN"/infer_load --repository "$soak_repo/models" --model mlp_gpu \
    --body "$soak_repo/body.json" --duration "${SOAK_SECONDS:-480}" --warmup "${SOAK_WARMUP:-120}" \
    --out "$soak_repo/out" > "$OUT/soak.json" 2> "$soak_repo/soak.err"
  rc=$?
  [ "$rc" -eq 0 ] && say "PASS soak (${SOAK_SECONDS:-480} s)" || { say "FAIL soak (exit $rc)"; status=1; }
  grep -E '"(rps|errors|reloads|drift|flat|first_median|last_median|server_exit|ok)"' "$OUT/soak.json" \
    | head -40 >> "$summary"
  { echo "# soak: samples"; cat "$soak_repo/out/samples.csv"; echo "# soak: stderr"; tail -20 "$soak_repo/soak.err";
    echo "# soak: server log (tail)"; tail -40 "$soak_repo/out/server.log"; } >> "$OUT/server.log"
  rm -rf "$soak_repo"
fi

# 9. grpc (not in the default STEPS; issue 15): bench/grpc_vs_http.py: the same identity model
#    over gRPC and HTTP at 16 FP32 (gRPC >= HTTP), and gRPC against a raw loopback TCP echo of
#    4 MiB each way (>= 0.9), one server, one run (GRPC_ARGS adds arguments); then
#    bench/shm_vs_body.py: 64 MiB through system shared memory against the body (>= 5x;
#    SHM_ARGS).
if has_step grpc; then
  grpc_tmp=$(mktemp -d)
  timeout 400 python3 bench/grpc_vs_http.py --vramd "$BIN"/vramd --infer-load "$BIN"/infer_load \
    --grpc-load "$BIN"/grpc_infer_load --out "$OUT/grpc_bench.json" ${GRPC_ARGS:-} \
    > "$grpc_tmp/grpc.out" 2> "$grpc_tmp/grpc.err"
  rc=$?
  grep -E '^(PASS|FAIL|FIGURE)' "$grpc_tmp/grpc.out" >> "$summary"
  [ "$rc" -eq 0 ] && say "PASS grpc bench" || { say "FAIL grpc bench (exit $rc)"; status=1; }
  # System shared memory against the request body for a 64 MiB tensor (issue 15: >= 5x).
  timeout 300 python3 bench/shm_vs_body.py --vramd "$BIN"/vramd --out "$OUT/grpc_bench.json" \
    ${SHM_ARGS:-} > "$grpc_tmp/shm.out" 2>> "$grpc_tmp/grpc.err"
  rc=$?
  grep -E '^(PASS|FAIL|FIGURE)' "$grpc_tmp/shm.out" >> "$summary"
  [ "$rc" -eq 0 ] || status=1
  { echo "# grpc bench: stderr"; tail -40 "$grpc_tmp/grpc.err"; } >> "$OUT/server.log"
  rm -rf "$grpc_tmp"
fi

# 9b. grpc_diag (not in the default STEPS): the 16-element series alone under variants of the
#    server, to find what holds gRPC below HTTP at high concurrency. GRPC_DIAG_VARIANTS is a list
#    of name:setting, the setting either ENV=VALUE for the server's environment or a vramd flag
#    (e.g. "t32:--grpc-infer-thread-count=32"); each prints its ratio and the cores the server
#    and the client kept busy. GRPC_DIAG_LARGE (e.g. "1,4") adds the 4 MiB series against the
#    TCP echo, for transport settings given as VRAMD_GRPC_CHANNEL_ARGS (docs/grpc.md), e.g.
#    GRPC_DIAG_VARIANTS="default: frame:VRAMD_GRPC_CHANNEL_ARGS=grpc.http2.max_frame_size=16777215"
#    A setting bin=FILE runs another vramd binary instead (one built from an earlier commit and
#    put into device-dist/bin by hand), to compare two builds in one run: "base:bin=vramd_base";
#    client=FILE the same for the gRPC load generator: "oldclient:client=grpc_infer_load_old".
if has_step grpc_diag; then
  for v in ${GRPC_DIAG_VARIANTS:-default: epoll1:GRPC_POLL_STRATEGY=epoll1 t32:--grpc-infer-thread-count=32}; do
    name=${v%%:*}; setting=${v#*:}; env_set=(); flag=(); server_bin="$BIN"/vramd
    client_bin="$BIN"/grpc_infer_load
    case "$setting" in
      "") ;;
      --*) flag=(--server-arg="$setting");;
      bin=*) server_bin="$BIN/${setting#bin=}"
             [ -x "$server_bin" ] || { say "FAIL grpc_diag $name: no $server_bin"; status=1; continue; };;
      client=*) client_bin="$BIN/${setting#client=}"
             [ -x "$client_bin" ] || { say "FAIL grpc_diag $name: no $client_bin"; status=1; continue; };;
      *) env_set=("$setting");;
    esac
    echo "# grpc_diag $name: ${setting:-as shipped}" | tee -a "$summary"
    env "${env_set[@]}" timeout 200 python3 bench/grpc_vs_http.py --vramd "$server_bin" --infer-load "$BIN"/infer_load \
      --grpc-load "$client_bin" --large-concurrency "${GRPC_DIAG_LARGE:-}" "${flag[@]}" ${GRPC_DIAG_ARGS:---duration 3 --concurrency 1,16} \
      2>&1 | grep -E '^(16 elements|4 MiB|FIGURE)' | tee -a "$summary"
  done
fi

# 10. cudashm (not in the default STEPS; issue 15): tests/device/cuda_shm_check.py: a client's
#    CUDA buffers registered by IPC handle carry an mlp's input and output with no host copy
#    (vramd_copy_bytes_total), shown in /v2/memory as client owners until unregistered.
if has_step cudashm; then
  run_check cudashm.log "cuda shared memory check" 300 python3 tests/device/cuda_shm_check.py \
    --vramd "$BIN"/vramd --make-model scripts/make_mlp_model.py ${CUDASHM_ARGS:-}
fi

# 11. ensemble (not in the default STEPS; issue 16): tests/device/ensemble_gpu_check.py: two
#    KIND_GPU mlp models chained by an ensemble pass their intermediate tensor in device memory
#    (vramd_copy_bytes_total: only the input up and the output down), against the client calling
#    them one after the other.
if has_step ensemble; then
  run_check ensemble.log "ensemble GPU check" 300 python3 tests/device/ensemble_gpu_check.py \
    --vramd "$BIN"/vramd --make-model scripts/make_mlp_model.py ${ENSEMBLE_ARGS:-}
fi

# 15. vmm (not in the default STEPS; issue 17, item 5): bench/fragmentation_replay: one
#    fragmenting trace (sizes 64 KiB to 8 MiB, frees in random order, filled to VMM_FILL of the
#    free memory, default 0.9) against the caching pool and then the VMM pool on cuda:0, and one allocation
#    of half the free memory after it: the VMM pool serves it, the caching pool does not.
if has_step vmm; then
  timeout 400 "$BIN"/fragmentation_replay --device cuda:0 --fill "${VMM_FILL:-0.9}" \
    ${VMM_ARGS:-} > "$OUT/vmm.log" 2>&1
  rc=$?
  cat "$OUT/vmm.log" >> "$summary"
  [ "$rc" -eq 0 ] && say "PASS vmm fragmentation replay" || { say "FAIL vmm fragmentation replay (exit $rc)"; status=1; }
fi

# 12. sleep (not in the default STEPS; issue 17, item 4): tests/device/sleep_gpu_check.py:
#    KIND_GPU mlp models of SLEEP_SIZES (default 1GiB,8GiB): cold load, sleep (NVML and the
#    ledger), wake time and copy rate against pinned H2D measured in the same run, a request
#    that wakes, level 2.
if has_step sleep; then
  run_check sleep.log "sleep GPU check" 580 python3 tests/device/sleep_gpu_check.py \
    --vramd "$BIN"/vramd --make-model scripts/make_mlp_model.py --sizes "${SLEEP_SIZES:-1GiB,8GiB}"
fi
# 12b. sleep_torch: the same for a KIND_GPU TorchScript model (the pytorch backend built here).
if has_step sleep_torch; then
  if [ -x build-torch-device/backends/pytorch/libvramd_pytorch.so ] \
     || timeout "${PYTORCH_BUILD_TIMEOUT:-300}" bash scripts/device/build_torch.sh >> "$OUT/benchmarks.log" 2>&1; then
    run_check sleep_torch.log "sleep torch GPU check" 280 python3 tests/device/sleep_gpu_check.py \
      --vramd "$BIN"/vramd --make-model scripts/make_mlp_model.py --sizes "" \
      --torch-backend-dir build-torch-device/backends
  else
    say "FAIL sleep_torch: build_torch.sh failed (log in benchmarks.log)"; status=1
  fi
fi

# 13. admission (not in the default STEPS; issue 17, item 2): tests/device/admission_gpu_check.py:
#    three KIND_GPU TorchScript models whose executions together pass a device budget, clients
#    at 3x the instances for ADMISSION_SECONDS (default 60): no request fails for memory with
#    admission; the same load without it is refused by the budget (needs the pytorch backend).
#    ADMISSION_MODE=free: no budget, admitted against the GPU's free memory under a filler
#    process (--memory-admission-device-free); ADMISSION_ARGS adds arguments.
if has_step admission; then
  if [ -x build-torch-device/backends/pytorch/libvramd_pytorch.so ] \
     || timeout "${PYTORCH_BUILD_TIMEOUT:-300}" bash scripts/device/build_torch.sh >> "$OUT/benchmarks.log" 2>&1; then
    timeout 400 python3 tests/device/admission_gpu_check.py --vramd "$BIN"/vramd \
      --infer-load "$BIN"/infer_load --backend-dir build-torch-device/backends \
      --seconds "${ADMISSION_SECONDS:-60}" --mode "${ADMISSION_MODE:-budget}" ${ADMISSION_ARGS:-} \
      > "$OUT/admission.log" 2>&1
    rc=$?
    grep -E '^(PASS|FAIL|FIGURE|# .*first error)' "$OUT/admission.log" | cut -c1-600 >> "$summary"
    [ "$rc" -eq 0 ] && say "PASS admission GPU check" || { say "FAIL admission GPU check (exit $rc)"; status=1; }
  else
    say "FAIL admission: build_torch.sh failed (log in benchmarks.log)"; status=1
  fi
fi

# 14. governance (not in the default STEPS; issue 17): bench/governance_cost.py: what the budget's
#    quota check and memory-aware admission cost a request of a tiny KIND_GPU mlp in process
#    (inprocess_infer), against the same request with neither, runs alternating.
if has_step governance; then
  timeout 200 python3 bench/governance_cost.py --inprocess "$BIN"/inprocess_infer \
    --device cuda:0 --rounds "${GOVERNANCE_ROUNDS:-5}" > "$OUT/governance.log" 2>&1
  rc=$?
  grep -E '^(FIGURE|\{)' "$OUT/governance.log" | cut -c1-600 | tee -a "$summary"
  [ "$rc" -eq 0 ] || { say "FAIL governance cost (exit $rc)"; status=1; }
fi

# 15. trace (not in the default STEPS; issue 18): bench/trace_overhead.py: req/s of a 16-element
#    identity model over HTTP with tracing off and at rate 1, alternating in one server run, in
#    Triton's trace-file mode and in OpenTelemetry mode (OTLP/HTTP JSON to the script's collector);
#    then bench/trace_off_cost.py: the same model in process (inprocess_infer) without a tracer,
#    with one whose level is OFF, and at rate 1: what tracing off costs a request, in ns.
if has_step trace; then
  timeout 150 python3 bench/trace_off_cost.py --inprocess "$BIN"/inprocess_infer \
    --rounds "${TRACE_ROUNDS:-7}" --duration 2 > "$OUT/tmp.log" 2>&1
  rc=$?
  echo "# in process" | tee -a "$summary"
  grep -E '^(FIGURE|\{)' "$OUT/tmp.log" | cut -c1-600 | tee -a "$summary"
  cat "$OUT/tmp.log" >> "$OUT/trace.log"; rm -f "$OUT/tmp.log"
  [ "$rc" -eq 0 ] || { say "FAIL trace off cost (exit $rc)"; status=1; }
  for mode in triton opentelemetry; do
    timeout 250 python3 bench/trace_overhead.py --vramd "$BIN"/vramd --infer-load "$BIN"/infer_load \
      --mode "$mode" --rounds "${TRACE_ROUNDS:-6}" --duration "${TRACE_DURATION:-3}" \
      --concurrency "${TRACE_CONCURRENCY:-8}" > "$OUT/tmp.log" 2>&1
    rc=$?
    echo "# mode $mode" | tee -a "$summary"
    grep -E '^(FIGURE|\{)' "$OUT/tmp.log" | cut -c1-600 | tee -a "$summary"
    cat "$OUT/tmp.log" >> "$OUT/trace.log"; rm -f "$OUT/tmp.log"
    [ "$rc" -eq 0 ] || { say "FAIL trace overhead $mode (exit $rc)"; status=1; }
  done
fi

# 16. placement (not in the default STEPS; issue 19): tests/device/placement_gpu_check.py: no
#    CUDA context until a GPU model loads, one context for 4 instances on GPU 0 with the weights
#    once, Triton's instance names, an ordinal past the GPUs refused, CUDA_VISIBLE_DEVICES
#    honoured; then gpu_memory_test: the GPU-to-GPU copy test (one GPU: the same-GPU route;
#    two: the peer route and its rate against cudaMemcpyPeer) and the unattributed figure over
#    contexts made through DeviceContexts.
if has_step placement; then
  run_check placement.log "placement check" 300 python3 tests/device/placement_gpu_check.py \
    --vramd "$BIN"/vramd --make-model scripts/make_mlp_model.py ${PLACEMENT_ARGS:-}
  for t in "$BIN"/gpu_memory_test "$BIN"/vramd_unit_tests; do
    [ -x "$t" ] || continue
    filter='*'; [ "$(basename "$t")" = vramd_unit_tests ] && filter='NvmlTest.*:DeviceContextsTest.*:InstancePlacementTest.*'
    "$t" --gtest_color=no --gtest_filter="$filter" > "$OUT/tmp.log" 2>&1
    rc=$?
    grep -E '^(FIGURE|route|one GPU|cuda:)' "$OUT/tmp.log" | tee -a "$summary"
    cat "$OUT/tmp.log" >> "$OUT/placement.log"; rm -f "$OUT/tmp.log"
    [ "$rc" -eq 0 ] && say "PASS $(basename "$t") $filter" || { say "FAIL $(basename "$t") $filter (exit $rc)"; status=1; }
  done
fi

# At most 8 files come back: fold gpu_tests.log into benchmarks.log when there are more.
if [ "$(find "$OUT" -maxdepth 1 -type f | wc -l)" -gt 8 ] && [ -f "$OUT/gpu_tests.log" ]; then
  { echo "# gpu_tests.log"; cat "$OUT/gpu_tests.log"; } >> "$OUT/benchmarks.log" && rm -f "$OUT/gpu_tests.log"
fi
say "# done, status $status"
exit $status
