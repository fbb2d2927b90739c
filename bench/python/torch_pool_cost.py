#!/usr/bin/env python3
"""What a torch model.py pays for running under a stream and a MemPool of its own, without
vramd: the torch model.py of throughput_compare.py (bench/torch/make_model.py's TorchScript net,
input from numpy, output back to numpy) run by --threads threads of one process, each with its
own copy of the weights, as vramd's instances are. Each variant runs in a fresh process (its own
CUDA context, so NVML's per-process figure is its own), --rounds times interleaved, and prints
forwards/s, NVML's process figure and how often the pool's allocator was called while measured.

Variants (a thread's stream / its pool / how the pool is entered):
  legacy              the legacy default stream, torch's default pool
  stream              a stream per thread, entered per call (with torch.cuda.stream)
  legacy+pool         a MemPool per thread over a pluggable allocator, entered per call with
                      torch.cuda.use_mem_pool (vramd's default today)
  stream+pool         both, per call (VRAMD_PYTHON_TORCH_INSTANCE_STREAM on)
  stream+native_pool  a MemPool over torch's own allocator: the pool without the pluggable path
  stream+pool_c       stream and pool entered per call by torch._C's functions, no context
                      managers
  stream+pool_thread  stream and pool entered once by each thread and kept
The pluggable allocator is a tiny C library built here with `cc` (cudaMalloc/cudaFree found in
the process torch already loaded) that counts its calls; without a compiler the pool variants
are skipped, and the output says so.

  torch_pool_cost.py [--threads 8] [--duration 5] [--warmup 2] [--rounds 2] [--width 64]
                     [--image 112] [--variants a,b,...] [--out FILE.json] [--work DIR]
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = ["legacy", "stream", "legacy+pool", "stream+pool", "stream+native_pool",
            "stream+pool_c", "stream+pool_thread"]

ALLOCATOR_C = r'''
#include <dlfcn.h>
#include <stddef.h>
#include <sys/types.h>

typedef int (*malloc_fn)(void**, size_t);
typedef int (*free_fn)(void*);
static malloc_fn cuda_malloc;
static free_fn cuda_free;
static long long mallocs, frees;

static void resolve(void) {
  if (cuda_malloc) return;
  cuda_malloc = (malloc_fn)dlsym(RTLD_DEFAULT, "cudaMalloc");
  cuda_free = (free_fn)dlsym(RTLD_DEFAULT, "cudaFree");
  const char* names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
  for (int i = 0; i < 3 && !cuda_malloc; ++i) {
    void* lib = dlopen(names[i], RTLD_NOW | RTLD_NOLOAD);
    if (!lib) lib = dlopen(names[i], RTLD_NOW);
    if (!lib) continue;
    cuda_malloc = (malloc_fn)dlsym(lib, "cudaMalloc");
    cuda_free = (free_fn)dlsym(lib, "cudaFree");
  }
}

void* counting_malloc(ssize_t size, int device, void* stream) {
  void* p = NULL;
  resolve();
  __atomic_add_fetch(&mallocs, 1, __ATOMIC_RELAXED);
  if (!cuda_malloc || cuda_malloc(&p, (size_t)size) != 0) return NULL;
  return p;
}

void counting_free(void* p, ssize_t size, int device, void* stream) {
  resolve();
  __atomic_add_fetch(&frees, 1, __ATOMIC_RELAXED);
  if (cuda_free) cuda_free(p);
}

long long counting_mallocs(void) { return __atomic_load_n(&mallocs, __ATOMIC_RELAXED); }
long long counting_frees(void) { return __atomic_load_n(&frees, __ATOMIC_RELAXED); }
'''


def build_allocator(work):
    src = os.path.join(work, "counting_alloc.c")
    lib = os.path.join(work, "libcounting_alloc.so")
    with open(src, "w") as f:
        f.write(ALLOCATOR_C)
    for cc in ("cc", "gcc", "clang"):
        try:
            r = subprocess.run([cc, "-O2", "-shared", "-fPIC", src, "-o", lib, "-ldl"],
                               capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode == 0:
            return lib, ""
        why = r.stderr.strip()[-300:]
    else:
        why = "no C compiler (cc, gcc, clang)"
    return None, why


def nvml_process_mib(pid):
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if p.pid == pid and p.usedGpuMemory is not None:
                return p.usedGpuMemory / (1024 * 1024)
    except Exception:  # noqa: BLE001 (no NVML: the figure is left out)
        return None
    return None


def child(a):
    """One variant in this process: prints one JSON line."""
    import numpy as np
    import torch
    variant = a.child
    stream_on = variant.startswith("stream")
    pool_kind = ("native" if "native_pool" in variant else
                 "pluggable" if "pool" in variant else None)
    entry = ("thread" if variant.endswith("pool_thread") else
             "c" if variant.endswith("pool_c") else "call")
    device = torch.device("cuda", 0)
    torch.cuda.init()
    torch.empty(1, device=device)  # the context
    nvml_context = nvml_process_mib(os.getpid())
    counter = None
    allocator = None
    if pool_kind == "pluggable":
        counter = ctypes.CDLL(a.allocator)
        counter.counting_mallocs.restype = ctypes.c_longlong
        counter.counting_frees.restype = ctypes.c_longlong
        allocator = torch.cuda.memory.CUDAPluggableAllocator(
            a.allocator, "counting_malloc", "counting_free").allocator()
    C = torch._C

    class Instance:
        def __init__(self):
            self.stream = torch.cuda.Stream(device=device) if stream_on else None
            self.pool = None
            if pool_kind == "pluggable":
                self.pool = torch.cuda.MemPool(allocator)
            elif pool_kind == "native":
                self.pool = torch.cuda.MemPool()
            self.entered = False

        def call(self, fn, *args):
            if entry == "thread" and self.pool is not None:
                if not self.entered:  # this thread allocates to the pool from now on
                    torch.cuda.set_stream(self.stream)
                    C._cuda_beginAllocateCurrentThreadToPool(0, self.pool.id)
                    self.entered = True
                return fn(*args)
            if entry == "c" and self.pool is not None:
                previous = torch.cuda.current_stream(device)
                torch.cuda.set_stream(self.stream)
                C._cuda_beginAllocateCurrentThreadToPool(0, self.pool.id)
                try:
                    return fn(*args)
                finally:
                    C._cuda_endAllocateToPool(0, self.pool.id)
                    C._cuda_releasePool(0, self.pool.id)
                    torch.cuda.set_stream(previous)
            if self.stream is not None:
                with torch.cuda.stream(self.stream):
                    return self._pool_call(fn, *args)
            return self._pool_call(fn, *args)

        def _pool_call(self, fn, *args):
            if self.pool is None:
                return fn(*args)
            with torch.cuda.use_mem_pool(self.pool, device=device):
                return fn(*args)

    def load():
        return torch.jit.load(a.model, map_location=device).eval()

    x = np.fromfile(a.input, dtype=np.float32).reshape([1, 3, a.image, a.image])

    def forward(module):
        with torch.inference_mode():
            y = module(torch.from_numpy(x).to(device, non_blocking=False))
            return y.to("cpu").numpy()

    instances = [Instance() for _ in range(a.threads)]
    torch.cuda.synchronize()
    nvml_streams = nvml_process_mib(os.getpid())
    modules = []
    for inst in instances:  # initialize on one thread, as vramd's loader does
        if inst.stream is not None:  # the weights in the pool, as vramd's initialize puts them
            with torch.cuda.stream(inst.stream):
                modules.append(inst._pool_call(load))
        else:
            modules.append(inst._pool_call(load))
    torch.cuda.synchronize()
    nvml_loaded = nvml_process_mib(os.getpid())
    counts = [0] * a.threads
    start = threading.Barrier(a.threads + 1)
    phase = {"measure": False, "stop": False}

    def run(i):
        inst, module = instances[i], modules[i]
        start.wait()
        while not phase["stop"]:
            inst.call(forward, module)
            if phase["measure"]:
                counts[i] += 1
        if entry == "thread" and inst.entered:
            C._cuda_endAllocateToPool(0, inst.pool.id)
            C._cuda_releasePool(0, inst.pool.id)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(a.threads)]
    for t in threads:
        t.start()
    start.wait()
    time.sleep(a.warmup)
    m0 = counter.counting_mallocs() if counter else None
    f0 = counter.counting_frees() if counter else None
    phase["measure"] = True
    t0 = time.perf_counter()
    time.sleep(a.duration)
    phase["measure"] = False
    elapsed = time.perf_counter() - t0
    measured = sum(counts)
    m1 = counter.counting_mallocs() if counter else None
    f1 = counter.counting_frees() if counter else None
    phase["stop"] = True
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    out = {"variant": variant, "threads": a.threads, "forwards_per_s": measured / elapsed,
           "nvml_process_mib": nvml_process_mib(os.getpid()),
           "nvml_after_context_mib": nvml_context, "nvml_after_streams_mib": nvml_streams,
           "nvml_after_load_mib": nvml_loaded,
           # every pool's segments (torch's device-wide statistics count private pools too)
           "allocator_reserved_mib": torch.cuda.memory_reserved(0) / (1024 * 1024),
           "torch": torch.__version__}
    if counter:
        out["allocator_mallocs_measured"] = m1 - m0
        out["allocator_frees_measured"] = f1 - f0
        out["allocator_mallocs_total"] = counter.counting_mallocs()
    if instances[0].pool is not None:
        # What a model.py calling torch.cuda.empty_cache() inside its execute meets.
        try:
            with torch.cuda.use_mem_pool(instances[0].pool, device=device):
                torch.cuda.empty_cache()
            out["empty_cache_in_pool"] = "ok"
        except Exception as error:  # noqa: BLE001 (reported, not raised)
            out["empty_cache_in_pool"] = "%s: %s" % (type(error).__name__, str(error)[:300])
    print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--image", type=int, default=112)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", default=None)
    ap.add_argument("--work", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--model", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--input", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--allocator", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a)
        return 0
    work = a.work or tempfile.mkdtemp(prefix="vramd-torch-pool-cost-")
    os.makedirs(work, exist_ok=True)
    subprocess.run([sys.executable, os.path.join(HERE, "..", "torch", "make_model.py"), work,
                    "--name", "net", "--image", str(a.image), "--width", str(a.width),
                    "--max-batch-size", "0"], check=True, stdout=subprocess.DEVNULL, timeout=300)
    model = os.path.join(work, "repo", "net", "1", "model.pt")
    allocator, why = build_allocator(work)
    variants = [v for v in a.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        ap.error("unknown variants: %s" % ", ".join(unknown))
    if allocator is None:
        skipped = [v for v in variants if "pool" in v and "native" not in v]
        print("!!! SKIPPED %s: the counting allocator did not build: %s"
              % (", ".join(skipped), why), flush=True)
        variants = [v for v in variants if v not in skipped]
    results = {v: [] for v in variants}
    for r in range(a.rounds):
        for v in variants:
            cmd = [sys.executable, os.path.abspath(__file__), "--child", v, "--model", model,
                   "--input", os.path.join(work, "input.bin"), "--threads", str(a.threads),
                   "--duration", str(a.duration), "--warmup", str(a.warmup),
                   "--image", str(a.image)]
            if allocator:
                cmd += ["--allocator", allocator]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            line = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
            if p.returncode != 0 or not line.startswith("{"):
                print("FAIL %s round %d: exit %d: %s" % (v, r, p.returncode,
                                                        p.stderr.strip()[-800:]), flush=True)
                continue
            res = json.loads(line)
            results[v].append(res)
            print("# round %d %-20s %8.1f forwards/s  nvml %s MiB (context %s, streams %s, "
                  "loaded %s, torch reserved %.0f)  mallocs %s%s" % (
                r, v, res["forwards_per_s"], res["nvml_process_mib"],
                res["nvml_after_context_mib"], res["nvml_after_streams_mib"],
                res["nvml_after_load_mib"],
                res["allocator_reserved_mib"],
                res.get("allocator_mallocs_measured"),
                "  empty_cache in pool: " + res["empty_cache_in_pool"]
                if "empty_cache_in_pool" in res else ""), flush=True)
    base = max((x["forwards_per_s"] for x in results.get("legacy", [])), default=None)
    summary = {}
    for v, runs in results.items():
        if not runs:
            continue
        best = max(x["forwards_per_s"] for x in runs)
        summary[v] = {"best_forwards_per_s": best,
                      "spread": (best - min(x["forwards_per_s"] for x in runs)) / best,
                      "vs_legacy": best / base if base else None,
                      "nvml_process_mib": runs[-1]["nvml_process_mib"], "runs": runs}
        print("FIGURE torch_pool_cost_%s %.1f forwards/s (%s of legacy, spread %.1f%%, "
              "nvml %s MiB)" % (v, best, "%.3f" % (best / base) if base else "n/a",
                                100 * summary[v]["spread"], runs[-1]["nvml_process_mib"]),
              flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"threads": a.threads, "duration_s": a.duration, "width": a.width,
                       "image": a.image, "machine": os.uname().nodename,
                       "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                       "variants": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
