"""A slow model must not hold the HTTP I/O threads (issue 12, item 7).

Without dynamic batching the scheduler may run an execution on the HTTP thread that read the
request (the fast path, src/runtime/scheduler.h). With a 2.5 s model that path would hold the
I/O thread for the whole execution; with as many slow requests in flight as the server has
HTTP threads, health probes, metadata and every other model would wait for them. Here a
server with --http-thread-count 2 gets two concurrent requests to such a model, and while
they run each probe must answer in well under 0.5 s.
"""

import re
import threading
import time

import numpy as np

from v2client import Input, V2Client

SLOW_DELAY_S = 2.5
PROBE_LIMIT_S = 0.5
HTTP_THREADS = 2

IDENTITY = """
name: "%s"
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: %d } ]
%s
"""

MODELS = {
    # One instance per HTTP thread, so that each slow request has an idle instance and the
    # fast path would take it.
    "slow": IDENTITY % ("slow", HTTP_THREADS,
                        'parameters { key: "execute_delay_us" value { string_value: "%d" } }'
                        % int(SLOW_DELAY_S * 1e6)),
    "fast": IDENTITY % ("fast", 1, ""),
}


def _metrics_port(server):
    m = re.search(r"metrics listening on [^\s:]+:(\d+)", server.log())
    return int(m.group(1)) if m else None


def test_slow_executions_do_not_delay_probes_or_other_models(start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("slow-model-repo")
    for name, config in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
    server = start_server([repo], extra_args=["--http-thread-count", str(HTTP_THREADS)],
                          name="slow-model", ready_models=list(MODELS))

    x = np.arange(4, dtype=np.int32)
    slow_results = [None] * HTTP_THREADS

    def slow_infer(i):
        c = server.client(timeout=30)
        try:
            start = time.monotonic()
            r = c.infer("slow", [Input("INPUT0", "INT32", x + i)])
            slow_results[i] = (time.monotonic() - start, r.outputs["OUTPUT0"])
        finally:
            c.close()

    # Twice: the first round finds the version unmeasured, the second knows it is slow.
    for _ in range(2):
        slow_results[:] = [None] * HTTP_THREADS
        threads = [threading.Thread(target=slow_infer, args=(i,)) for i in range(HTTP_THREADS)]
        for t in threads:
            t.start()
        time.sleep(0.5)  # both requests read and executing

        timings = {}

        def probe(what, fn):
            c = server.client(timeout=10)
            try:
                start = time.monotonic()
                status = fn(c)
                timings[what] = time.monotonic() - start
                assert status == 200, (what, status)
            finally:
                c.close()

        probe("health/live", lambda c: c.get("/v2/health/live").status)
        probe("health/ready", lambda c: c.get("/v2/health/ready").status)
        probe("fast ready", lambda c: c.get("/v2/models/fast/ready").status)
        probe("fast metadata", lambda c: c.get("/v2/models/fast").status)
        probe("slow metadata", lambda c: c.get("/v2/models/slow").status)
        probe("fast infer",
              lambda c: c.infer_raw("fast", [Input("INPUT0", "INT32", x)]).status)
        metrics = _metrics_port(server)
        if metrics is not None:
            m = V2Client("127.0.0.1", metrics, timeout=10)
            probe_start = time.monotonic()
            assert m.get("/metrics").status == 200
            timings["metrics"] = time.monotonic() - probe_start
            m.close()
        still_running = any(t.is_alive() for t in threads)

        for t in threads:
            t.join(timeout=30)
        slow = {k: v for k, v in timings.items() if v >= PROBE_LIMIT_S}
        assert not slow, "probes delayed by the slow model: %s" % (
            ", ".join("%s %.2fs" % kv for kv in sorted(slow.items())))
        assert still_running, "the slow requests ended before the probes: nothing was tested"
        for i, result in enumerate(slow_results):
            assert result is not None, "slow request %d failed" % i
            elapsed, out = result
            assert elapsed >= SLOW_DELAY_S * 0.9, elapsed
            np.testing.assert_array_equal(out, x + i)
