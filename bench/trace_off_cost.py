#!/usr/bin/env python3
"""What tracing off costs a request (issue 18: "tracing off costs nothing measurable"), measured
where a few nanoseconds can be seen: the runtime without HTTP (bench/inprocess_infer), whose
requests take microseconds instead of tens of them, with no load generator or kernel socket
work beside them to blur the figure. Three series, alternating run by run (A B C A B C ...) so
that drift hits all of them:
  none   no tracer at all: what a server without the trace extension would do
  off    a tracer whose level is OFF (vramd's default): every request asks it, and is not sampled
  rate1  a tracer at TIMESTAMPS, rate 1, Triton's trace file every 10,000 traces: every request
         traced, stamped and written (the cost the HTTP benchmark, bench/trace_overhead.py,
         sets against a whole HTTP request)
The figures are differences of the medians of the time a request takes (1 / req/s at
concurrency 1, in ns) and ratios of the medians of req/s. The noise is none's two halves of
rounds against each other: off's cost is "nothing measurable" when it is inside that.

  trace_off_cost.py --inprocess BIN/inprocess_infer [--rounds 7] [--duration 2]
                    [--concurrency 1]

The model is a 16-element FP32 identity on one CPU instance (backend "identity"). Prints FIGURE
lines and one JSON line.
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile

MODEL = """name: "echo"
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""


def run(args, repo, inp, trace_flags):
    cmd = [args.inprocess, "--repository", repo, "--model", "echo", "--input", inp,
           "--shape", "16", "--concurrency", str(args.concurrency), "--duration",
           str(args.duration), "--warmup", "0.5"]
    for flag in trace_flags:
        cmd += ["--trace-config", flag]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError("inprocess_infer failed (%s): %s" % (" ".join(cmd), out.stderr[-500:]))
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["errors"]:
        raise RuntimeError("%d errors with %s" % (result["errors"], trace_flags))
    return result["rps"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inprocess", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--duration", type=float, default=2)
    ap.add_argument("--concurrency", type=int, default=1)
    args = ap.parse_args()
    work = tempfile.mkdtemp()
    os.makedirs(os.path.join(work, "repo", "echo", "1"))
    with open(os.path.join(work, "repo", "echo", "config.pbtxt"), "w") as f:
        f.write(MODEL)
    inp = os.path.join(work, "input.bin")
    with open(inp, "wb") as f:
        f.write(struct.pack("<16f", *range(16)))
    series = {
        "none": [],
        "off": ["level=OFF"],
        "rate1": ["level=TIMESTAMPS", "rate=1", "triton,file=" + os.path.join(work, "trace.json"),
                  "triton,log-frequency=10000"],
    }
    rps = {name: [] for name in series}
    for _ in range(args.rounds):
        for name, flags in series.items():
            rps[name].append(run(args, repo=os.path.join(work, "repo"), inp=inp,
                                 trace_flags=flags))
    # Traces were written: the rate-1 series really traced (a file per 10,000 and one at exit).
    written = [n for n in os.listdir(work) if n.startswith("trace.json")]
    if not written:
        raise RuntimeError("the rate-1 series wrote no trace file")

    ns = lambda name: statistics.median(1e9 * args.concurrency / r for r in rps[name])
    median = lambda name: statistics.median(rps[name])
    half = args.rounds // 2
    none_split = statistics.median(rps["none"][half:]) / statistics.median(rps["none"][:half])
    print("FIGURE trace_inprocess_none_ns_per_request %.0f ns" % ns("none"))
    print("FIGURE trace_inprocess_off_cost_ns_per_request %.0f ns (off - none)"
          % (ns("off") - ns("none")))
    print("FIGURE trace_inprocess_off_rps_ratio %.3f ratio (off / none)"
          % (median("off") / median("none")))
    print("FIGURE trace_inprocess_none_noise %.3f ratio (second half of rounds / first)"
          % none_split)
    print("FIGURE trace_inprocess_rate1_cost_ns_per_request %.0f ns (rate 1 - none)"
          % (ns("rate1") - ns("none")))
    print("FIGURE trace_inprocess_rate1_rps_ratio %.3f ratio (rate 1 / none)"
          % (median("rate1") / median("none")))
    print(json.dumps({"concurrency": args.concurrency, "rounds": args.rounds,
                      "rps_none": rps["none"], "rps_off": rps["off"], "rps_rate1": rps["rate1"],
                      "off_cost_ns": ns("off") - ns("none"), "none_noise": none_split,
                      "trace_files": len(written)}))


if __name__ == "__main__":
    sys.exit(main())
