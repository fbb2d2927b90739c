"""Dynamic batching and the queue policy end to end, on a repository of its own.

The models are identity models with execute_delay_us (a fixed cost per execution whatever the
batch size, src/backends/identity/identity_backend.h):
  - batched: dynamic batching; concurrent clients must each get back exactly what they sent,
    INT32 and BYTES, whatever batch their request ran in;
  - tiny_queue: max_queue_size 1 behind a slow instance: the overflow is answered at once with
    503 and Triton's "Exceeds maximum queue size";
  - timeouts: allow_timeout_override: a request whose "timeout" parameter expires while it
    waits is answered 503 "Request timeout expired".
"""

import threading
import time

import numpy as np
import pytest

from v2client import Input

BATCHED = """
name: "batched"
backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 2 ] },
        { name: "INPUT1" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2 ] },
         { name: "OUTPUT1" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
parameters { key: "execute_delay_us" value { string_value: "20000" } }
dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 20000 }
"""

SLOW_TEMPLATE = """
name: "%s"
backend: "identity"
max_batch_size: 1
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
parameters { key: "execute_delay_us" value { string_value: "400000" } }
dynamic_batching { default_queue_policy { %s } }
"""

MODELS = {
    "batched": BATCHED,
    "tiny_queue": SLOW_TEMPLATE % ("tiny_queue", "max_queue_size: 1"),
    "timeouts": SLOW_TEMPLATE % ("timeouts", "allow_timeout_override: true"),
}


@pytest.fixture(scope="module")
def batching_server(start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("batching-repo")
    for name, config in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(config)
    return start_server([repo], extra_args=["--http-thread-count", "4"], name="batching",
                        ready_models=list(MODELS))


def run_concurrently(functions):
    """Runs each function on its own thread, all released at once; returns their results."""
    results = [None] * len(functions)
    errors = []
    barrier = threading.Barrier(len(functions))

    def run(i, f):
        try:
            barrier.wait()
            results[i] = f()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i, f)) for i, f in enumerate(functions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def model_counts(server, model="batched"):
    """(inference_count, execution_count) from the statistics extension, or None without it."""
    r = server.client().get("/v2/models/%s/stats" % model)
    if r.status != 200:
        return None
    stats = r.json()["model_stats"][0]
    return int(stats["inference_count"]), int(stats["execution_count"])


def test_concurrent_clients_each_get_their_own_results(batching_server):
    clients, rounds = 12, 3

    def client_job(c):
        def job():
            client = batching_server.client()
            try:
                for r in range(rounds):
                    rows = 1 + (c + r) % 3
                    ints = np.arange(rows * 2, dtype=np.int32).reshape(rows, 2) + 1000 * c + 100 * r
                    strings = [["c%d-r%d-row%d%s" % (c, r, i, "x" * (c % 4))] for i in range(rows)]
                    binary = r % 2 == 1
                    result = client.infer("batched", [
                        Input("INPUT0", "INT32", ints, binary=binary),
                        Input("INPUT1", "BYTES", strings, shape=[rows, 1], binary=binary),
                    ], request_id="c%d-r%d" % (c, r))
                    assert result.json["id"] == "c%d-r%d" % (c, r)
                    np.testing.assert_array_equal(result.outputs["OUTPUT0"], ints)
                    assert list(result.outputs["OUTPUT0"].shape) == [rows, 2]
                    got = [[e.decode() if isinstance(e, bytes) else e for e in row]
                           for row in np.asarray(result.outputs["OUTPUT1"], dtype=object).tolist()]
                    assert got == strings
            finally:
                client.close()
            return True
        return job

    before = model_counts(batching_server)
    assert all(run_concurrently([client_job(c) for c in range(clients)]))
    after = model_counts(batching_server)
    if before and after:  # with the statistics extension: batches of more than one formed
        samples = sum(1 + (c + r) % 3 for c in range(clients) for r in range(rounds))
        assert after[0] - before[0] == samples, (before, after)
        assert after[1] - before[1] < clients * rounds, (before, after)


def test_requested_output_subset_is_kept_per_request(batching_server):
    def job(c):
        def run():
            client = batching_server.client()
            try:
                ints = np.full((1, 2), c, dtype=np.int32)
                result = client.infer("batched", [
                    Input("INPUT0", "INT32", ints),
                    Input("INPUT1", "BYTES", [["s%d" % c]]),
                ], outputs=["OUTPUT1"] if c % 2 else ["OUTPUT0"])
                names = [o["name"] for o in result.json["outputs"]]
                assert names == (["OUTPUT1"] if c % 2 else ["OUTPUT0"])
                if c % 2 == 0:
                    np.testing.assert_array_equal(result.outputs["OUTPUT0"], ints)
            finally:
                client.close()
            return True
        return run

    assert all(run_concurrently([job(c) for c in range(8)]))


def slow_request(server, model, value, parameters=None):
    client = server.client()
    try:
        return client.infer_raw(model, [Input("INPUT0", "INT32", np.full((1, 2), value, np.int32))],
                                parameters=parameters)
    finally:
        client.close()


def test_full_queue_answers_503_with_tritons_message(batching_server):
    # One request runs (400 ms), one waits (max_queue_size 1), the rest are refused at once
    # (or two are, when the second arrives before the instance has taken the first).
    responses = run_concurrently([lambda v=v: slow_request(batching_server, "tiny_queue", v)
                                  for v in range(6)])
    statuses = sorted(r.status for r in responses)
    assert set(statuses) <= {200, 503}, responses
    refused = [r for r in responses if r.status == 503]
    assert refused, "no request was refused with a queue of 1: %r" % responses
    assert 1 <= statuses.count(200) <= 3, responses
    for r in refused:
        assert "Exceeds maximum queue size" in r.error_message(), r
    for v, r in enumerate(responses):
        if r.status == 200:
            body = r.json()
            assert body["outputs"][0]["data"] == [v, v]


def test_request_timeout_expiring_in_the_queue_answers_503(batching_server):
    first = {}
    runner = threading.Thread(
        target=lambda: first.setdefault("r", slow_request(batching_server, "timeouts", 1)))
    runner.start()
    time.sleep(0.1)  # the first request is executing (400 ms)
    start = time.monotonic()
    late = slow_request(batching_server, "timeouts", 2, parameters={"timeout": 50000})
    runner.join()
    assert first["r"].status == 200, first["r"]
    assert late.status == 503, late
    assert "Request timeout expired" in late.error_message()
    assert time.monotonic() - start < 5


def test_timeout_parameter_must_be_a_non_negative_integer(batching_server):
    for bad in (-1, 1.5, "100", True):
        r = slow_request(batching_server, "timeouts", 0, parameters={"timeout": bad})
        assert r.status == 400, (bad, r)
        assert "'timeout'" in r.error_message(), r
