"""Memory of one large JSON reply (issue 12, item 8): the server's peak RSS growth while it
answers a 64 MiB FP32 tensor (sent binary) as JSON, measured by bench/json_reply_memory.py.

What must be resident at the peak: the reply's text (~174 MiB) and the output tensor it is
written from (64 MiB). The request body (64 MiB more) is not needed once the model has run, and
the text must not be copied on the way (grown by doubling, or copied into the HTTP layer). The
bound is those two plus 16 MiB for everything else; with the request body alive too, as before
this was fixed, the peak was the text plus both tensors (302 MiB against a bound of 254).
docs/benchmarks.md has the figures.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))

from json_reply_memory import CONFIG, MODEL, measure  # noqa: E402

MIB = 1 << 20
INPUT_MIB = 64
SLACK = 16 * MIB


def test_large_json_reply_peak_memory(start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("json-reply-repo")
    (repo / MODEL / "1").mkdir(parents=True)
    (repo / MODEL / "config.pbtxt").write_text(CONFIG)
    server = start_server([repo], extra_args=["--http-max-input-size", str(1 << 30)],
                          name="json-reply", ready_models=[MODEL])
    results = measure(server.proc.pid, server.port, mib=INPUT_MIB, rounds=2)
    for r in results:
        output_bytes = INPUT_MIB * MIB  # the identity's output is its input
        bound = r["json_bytes"] + output_bytes + SLACK
        growth = r["peak_growth_kib"] * 1024
        assert growth <= bound, (
            "peak RSS grew by %.1f MiB for a %.1f MiB JSON reply of a %d MiB tensor; the bound "
            "is %.1f MiB (reply + output + 16 MiB)"
            % (growth / MIB, r["json_bytes"] / MIB, INPUT_MIB, bound / MIB))
