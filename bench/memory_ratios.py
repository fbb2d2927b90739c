#!/usr/bin/env python3
"""Prints the memory benchmarks' figures as ratios against baselines measured in the same run.

    bench/memory_ratios.py memory_pool_bench.json ledger_bench.json

Reads Google Benchmark JSON (--benchmark_out_format=json). For each pooled pair it prints the
time and its ratio to the system allocator's pair of the same size from the same file
(cudaMalloc+cudaFree on the GPU, malloc+free on the CPU), and checks the issue's targets:
pooled pair <= 1 us on the GPU, ledger bookkeeping <= 200 ns per pair (one thread, no trace).
Exits 1 if a target is missed, 2 if a needed benchmark is absent (e.g. no GPU: the CUDA rows
were skipped)."""

import json
import sys


def load(path):
    with open(path) as f:
        rows = json.load(f)["benchmarks"]
    out = {}
    for r in rows:
        if r.get("error_occurred"):
            continue
        scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}[r.get("time_unit", "ns")]
        out[r["name"]] = (r["real_time"] * scale, r["cpu_time"] * scale)
    return out


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    pool, ledger = load(argv[1]), load(argv[2])
    status = 0

    def pair(name, baseline, target_ns=None, time_index=0):
        nonlocal status
        if name not in pool or baseline not in pool:
            print("MISSING %s or %s" % (name, baseline))
            status = max(status, 2)
            return
        t, b = pool[name][time_index], pool[baseline][time_index]
        verdict = ""
        if target_ns is not None:
            ok = t <= target_ns
            verdict = " target <= %.0f ns: %s" % (target_ns, "met" if ok else "MISSED")
            if not ok:
                status = max(status, 1)
        print("RATIO %s %.1f ns / %s %.1f ns = %.4g (%.3gx as fast)%s"
              % (name, t, baseline, b, t / b, b / t, verdict))

    for size in (512, 65536, 1048576, 67108864):
        pair("BM_HostPoolAllocFree/%d" % size, "BM_MallocFree/%d" % size, time_index=1)
    for size in (512, 67108864):
        pair("BM_CudaPoolAllocFree/%d/real_time" % size, "BM_CudaMallocFree/%d/real_time" % size,
             target_ns=1000)
    pair("BM_CudaPoolAllocFree/67108864/real_time",
         "BM_CudaMallocAsyncFree/bytes:67108864/sync:0/real_time", target_ns=1000)

    name = "BM_LedgerRecordPair/trace:0/threads:1"
    if name in ledger:
        cpu = ledger[name][1]
        ok = cpu <= 200
        status = max(status, 0 if ok else 1)
        print("LEDGER %s %.1f ns per pair (cpu) target <= 200 ns: %s"
              % (name, cpu, "met" if ok else "MISSED"))
        base = "BM_HostPoolAllocFree/512"
        if base in pool:
            print("RATIO ledger pair / pooled CPU pair = %.2f" % (cpu / pool[base][1]))
    else:
        print("MISSING %s" % name)
        status = max(status, 2)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
