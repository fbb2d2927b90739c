#!/usr/bin/env bash
# Where a TorchScript request's time and memory go inside vramd: serves bench/torch's ResNet-like
# model with 4 instances, once with the ledger allocators and once with LibTorch's own
# (VRAMD_PYTORCH_LEDGER_ALLOCATORS=0), each with VRAMD_PYTORCH_PROFILE=1 (the backend logs the
# mean time of inputs / forward / outputs every 200 executions), drives it with infer_load at
# concurrency 1 and 8, prints the profile lines and the ledger's view of each owner, and runs
# direct_bench at the same concurrencies for the floor; bench/inprocess_infer (when built beside
# infer_load) gives the runtime's figure without HTTP.
#   bash bench/torch/diagnose.sh VRAMD INFER_LOAD BACKEND_DIR DIRECT_BENCH [gpu|cpu] [OUTDIR]
set -uo pipefail
vramd=$1 load=$2 backends=$3 direct=$4 kind=${5:-gpu} out=${6:-/tmp/vramd-diagnose}
py=${PYTHON:-python3}
mkdir -p "$out"
# MODEL_ARGS: more make_model.py arguments (e.g. "--image 32 --width 16"); INSTANCES: per model.
$py bench/torch/make_model.py "$out/m" --instances "${INSTANCES:-4}" --kind "$kind" ${MODEL_ARGS:-} > /dev/null || exit 1
read -r name hl shape < <($py -c 'import json,sys; m=json.load(open(sys.argv[1]))
print(m["name"], m["header_length"], ",".join(map(str, m["input_shape"])))' "$out/m/meta.json")
port=18577
# VARIANTS: "name[:VAR=value,VAR=value]" each; DIRECT_VARIANTS likewise for direct_bench, where
# an item starting with "--" is a direct_bench argument instead (e.g. "like_server:--server-like");
# VRAMD_SERVE_ARGS: more `vramd serve` arguments for every variant.
VARIANTS=${VARIANTS:-"ledger torch_allocators:VRAMD_PYTORCH_LEDGER_ALLOCATORS=0"}
DIRECT_VARIANTS=${DIRECT_VARIANTS:-"default"}
CONCURRENCY=${CONCURRENCY:-"1 8"}
for spec in $VARIANTS; do
  variant=${spec%%:*}
  env_args=(VRAMD_PYTORCH_PROFILE=1)
  [ "$spec" != "$variant" ] && IFS=, read -r -a extra <<< "${spec#*:}" && env_args+=("${extra[@]}")
  env "${env_args[@]}" "$vramd" serve --http-port $port --grpc-port 0 --no-allow-metrics \
    --model-repository "$out/m/repo" --backend-directory "$backends" ${VRAMD_SERVE_ARGS:-} \
    > "$out/$variant.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -sf localhost:$port/v2/models/$name/ready > /dev/null && break; sleep 0.2; done
  # Which CUDA / cuDNN / OpenMP libraries the server process actually mapped.
  grep -oE '/[^ ]*lib(cuda|cudart|cublas|cublasLt|cudnn|nvrtc|gomp|torch_cuda)[^/ ]*\.so[^ ]*' /proc/$pid/maps 2>/dev/null \
    | sort -u | sed "s/^/  $variant maps: /" | head -20
  for c in $CONCURRENCY; do
    lines=$(wc -l < "$out/$variant.log")
    echo "$variant c=$c: $("$load" --port $port --model "$name" --body-file "$out/m/request.bin" \
      --header-length "$hl" --concurrency $c --duration 4 --warmup 1)"
    # The backend's last profile line of this concurrency (VRAMD_PYTORCH_PROFILE=1).
    tail -n +$((lines + 1)) "$out/$variant.log" | grep "profile of" | tail -1 \
      | sed -e "s/^.*profile of/  $variant c=$c profile of/"
  done
  curl -s localhost:$port/v2/memory > "$out/$variant.memory.json"
  $py - "$out/$variant.memory.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
def walk(n):
    yield n
    for c in n.get("children", []):
        yield from walk(c)
for n in walk(r["owners"]):
    if n["subtree_live_bytes"] or n["peak_bytes"]:
        print("  owner %-60s live %8.1f MiB peak %8.1f MiB by_device %s" % (
            n["path"], n["live_bytes"] / 2**20, n["peak_bytes"] / 2**20,
            {k: round(v / 2**20, 1) for k, v in n["by_device"].items()}))
for p in r["pools"]:
    print("  pool %-8s reserved %8.1f MiB allocated %8.1f MiB peak reserved %8.1f MiB segments %d" % (
        p["device"], p["reserved_bytes"] / 2**20, p["allocated_bytes"] / 2**20,
        p["peak_reserved_bytes"] / 2**20, p["segments"]))
for u in r.get("unattributed", []):
    print("  unattributed %s: %s" % (u["device"], {k: v for k, v in u.items() if k != "device"}))
PY
  kill -TERM $pid; wait $pid
  grep -h -m1 "graph run on" "$out/$variant.log" | sed "s/^/  $variant: /"
  # VRAMD_PYTORCH_OP_STATS=1: the last operator table the backend logged.
  # VRAMD_PYTORCH_OP_STATS=1: the OPS_TABLE-th operator table the backend logged (the first
  # ones include the warm-up; with the default CONCURRENCY the third is from the c=1 run).
  awk -v want="${OPS_TABLE:-3}" '/operators \(total us/{n++; keep=(n==want)} /profile of|graph run/{keep=0} keep' \
    "$out/$variant.log" | head -27 | sed "s/^/  $variant ops: /"
done
# The same model through vramd's runtime without HTTP (bench/inprocess_infer, built beside
# infer_load): what is left of the gap once the front end is out of the way.
inprocess="$(dirname "$load")/inprocess_infer"
# INPROCESS_VARIANTS: "name[:VAR=value,...]" each, as VARIANTS; each one's log goes to
# $out/inprocess-<name>.log and its last profile line is printed.
if [ -x "$inprocess" ]; then
  for spec in ${INPROCESS_VARIANTS:-default:VRAMD_PYTORCH_PROFILE=1}; do
    variant=${spec%%:*}
    env_args=(VRAMD_UNUSED=0)
    [ "$spec" != "$variant" ] && IFS=, read -r -a extra <<< "${spec#*:}" && env_args+=("${extra[@]}")
    env "${env_args[@]}" "$inprocess" --repository "$out/m/repo" --model "$name" --backend-directory "$backends" \
      --input "$out/m/input.bin" --shape "$shape" --concurrency "$(echo $CONCURRENCY | tr ' ' ,)" \
      --duration 4 --warmup 1 2> "$out/inprocess-$variant.log" | sed "s/^/inprocess $variant: /"
    grep -h "profile of" "$out/inprocess-$variant.log" | tail -1 | sed "s/^.*profile of/  inprocess $variant profile of/"
  done
fi
for spec in $DIRECT_VARIANTS; do
  variant=${spec%%:*}
  env_args=() direct_args=()
  if [ "$spec" != "$variant" ]; then
    IFS=, read -r -a items <<< "${spec#*:}"
    for item in "${items[@]}"; do
      case "$item" in --*) direct_args+=("$item") ;; *) env_args+=("$item") ;; esac
    done
  fi
  env "${env_args[@]}" "$direct" "${direct_args[@]}" --model "$out/m/repo/$name/1/model.pt" --input "$out/m/input.bin" \
    --shape "$shape" --device "$([ "$kind" = gpu ] && echo cuda:0 || echo cpu)" \
    --concurrency "$(echo $CONCURRENCY | tr ' ' ,)" --duration 4 --warmup 1 2>&1 | sed "s/^/direct $variant: /"
done
