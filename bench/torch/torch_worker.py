#!/usr/bin/env python3
"""The Python baselines of memory_compare.py: one process holding a TorchScript module on a GPU,
as a Triton Python-backend instance does (b), or one process with N threads sharing one module,
each thread with its own CUDA stream (c).

  torch_worker.py MODEL_PT INPUT_BIN SHAPE [--threads N] [--iters K] [--device cuda:0]

Loads the module onto the device, then each of the N threads (1 by default: the process case)
runs K forwards concurrently with the others (input host->device, forward under
torch.inference_mode, output back to host, stream synchronized). Then prints
"READY <pid> <iterations>" and holds everything until its stdin closes (or it is killed), so the
parent can read NVML meanwhile. torch only (no numpy).
"""
import argparse
import os
import sys
import threading

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_pt")
    ap.add_argument("input_bin")
    ap.add_argument("shape", help="comma separated, e.g. 1,3,112,112")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--device", default="cuda:0")
    a = ap.parse_args()

    dev = torch.device(a.device)
    shape = [int(s) for s in a.shape.split(",")]
    with open(a.input_bin, "rb") as f:
        data = bytearray(f.read())
    x = torch.frombuffer(data, dtype=torch.float32).reshape(shape).clone()
    module = torch.jit.load(a.model_pt, map_location=dev)
    module.eval()
    cuda = dev.type == "cuda"
    if cuda:
        x = x.pin_memory()

    barrier = threading.Barrier(a.threads)
    errors = []
    done = [0] * a.threads

    def run(i):
        try:
            stream = torch.cuda.Stream(device=dev) if cuda else None
            ctx = torch.cuda.stream(stream) if cuda else _Null()
            barrier.wait(timeout=120)
            with ctx, torch.inference_mode():
                for _ in range(a.iters):
                    y = module(x.to(dev, non_blocking=True))
                    y.to("cpu")
                    if cuda:
                        stream.synchronize()
                    done[i] += 1
        except Exception as e:  # noqa: BLE001 (reported to the parent)
            errors.append(repr(e))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(a.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if cuda:
        torch.cuda.synchronize(dev)
    if errors:
        print("ERROR " + errors[0], flush=True)
        return 1
    print(f"READY {os.getpid()} {sum(done)}", flush=True)
    sys.stdin.read()  # hold the memory until the parent closes our stdin
    return 0


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    sys.exit(main())
