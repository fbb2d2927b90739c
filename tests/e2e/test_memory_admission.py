"""Memory-aware admission (docs/memory.md, "Admission"; issue 17, item 2): on a device with a
budget (--memory-budget), an execution starts only when what it is predicted to make (learned
per batch size from the ledger) fits beside what the server holds, and otherwise waits. A burst
then queues instead of failing.

The model is the echo_c test backend: each execution copies its 512 KiB input into scratch
memory charged to the request and holds it for 100 ms (execute_delay_us), on 4 instances. The
budget, 1.25 MiB of host memory ("cpu" stands for a GPU: the same code), holds two such copies
beside the instances' workspaces, not three. The same burst against the same server with
admission off (--memory-admission=false) fails in part: the burst does exceed the budget."""

import threading

import numpy as np

from e2e_helpers import TEST_BACKENDS_DIR, needs_echo_c, wait_for
from v2client import InferResult, Input


pytestmark = needs_echo_c

SCRATCH = 512 * 1024
BURST = 8

CONFIG = """
backend: "echo_c"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 4 } ]
parameters { key: "execute_delay_us" value { string_value: "100000" } }
"""


def start(start_server, tmp_path_factory, admission, extra=()):
    repo = tmp_path_factory.mktemp("admission-repo")
    (repo / "burst" / "1").mkdir(parents=True)
    (repo / "burst" / "config.pbtxt").write_text(CONFIG)
    return start_server([repo], ["--backend-directory", TEST_BACKENDS_DIR,
                                 "--memory-budget", "cpu=1.25MiB",
                                 "--memory-admission=%s" % ("true" if admission else "false")]
                        + list(extra),
                        name="admission-%s" % admission, ready_models=["burst"])


def burst(server, model="burst", values=None):
    """One request alone (the model learns its peak), then BURST at once, request i sending
    values + i; (values, the answers)."""
    if values is None:
        values = np.arange(SCRATCH // 4, dtype=np.float32)
    client = server.client()
    try:
        first = client.infer_raw(model, [Input("INPUT0", "FP32", values, binary=True)])
        assert first.status == 200, first
        # Learned once the execution has returned, which is after its answer was sent: a
        # request sent at once may still find nothing learned, and run unpredicted.
        wait_for(lambda: learned(client.get("/v2/memory").json(), model), timeout=10,
                 what="the %s model's learned execution peak" % model)
    finally:
        client.close()
    answers = [None] * BURST
    go = threading.Barrier(BURST)

    def send(i):
        c = server.client()
        try:
            go.wait()
            answers[i] = c.infer_raw(model, [Input("INPUT0", "FP32", values + i, binary=True)])
        finally:
            c.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(BURST)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return values, answers


def assert_all_answered(values, answers):
    """Every request of the burst succeeded with its own answer (request i sent values + i)."""
    failed = [(i, a.status, a.error_message()) for i, a in enumerate(answers) if a.status != 200]
    assert not failed, failed
    for i, a in enumerate(answers):
        np.testing.assert_array_equal(InferResult(a).outputs["OUTPUT0"], values + i)


def test_a_burst_past_the_budget_queues_instead_of_failing(start_server, tmp_path_factory):
    server = start(start_server, tmp_path_factory, admission=True)
    values, answers = burst(server)
    assert_all_answered(values, answers)
    client = server.client()
    try:
        report = client.get("/v2/memory").json()
    finally:
        client.close()
    version = next(n for n in walk(report["owners"]) if n["path"] == "server/model:burst/version:1")
    assert version["execution_peaks"] == [
        {"device": "cpu", "batch_size": 1, "bytes": SCRATCH}], version
    (admission,) = report["admission"]
    assert admission["device"] == "cpu", admission
    # The first request alone had no prediction (it ran alone, as one of unknown size does);
    # the burst's eight had one, and those that did not fit beside two running waited.
    assert admission["admitted"] == BURST + 1, admission
    assert admission["waited"] >= 1, admission
    assert admission["timed_out"] == 0 and admission["reserved_bytes"] == 0, admission
    (budget,) = report["owners"]["quota"]
    assert budget["refusals"] == 0, budget


def test_the_same_burst_without_admission_fails_in_part(start_server, tmp_path_factory):
    server = start(start_server, tmp_path_factory, admission=False)
    _, answers = burst(server)
    failed = [a for a in answers if a.status != 200]
    assert failed, "the burst fit the budget without admission: the test shows nothing"
    for a in failed:
        assert "the server's memory budget (--memory-budget) refuses 512.0 KiB on cpu" in \
            a.error_message(), a.error_message()
        # Who holds the budget: the executions running beside it, by owner.
        assert "Held on cpu:" in a.error_message(), a.error_message()
        assert "server/model:burst/version:1/instance:burst_" in a.error_message(), \
            a.error_message()
    client = server.client()
    try:
        report = client.get("/v2/memory").json()
    finally:
        client.close()
    assert report["admission"] == [], report["admission"]


def test_an_execution_whose_wait_runs_out_is_told_who_holds_the_memory(start_server,
                                                                       tmp_path_factory):
    # 30 ms is shorter than the 100 ms an admitted execution runs: those that wait time out.
    server = start(start_server, tmp_path_factory, admission=True,
                   extra=["--memory-admission-wait-ms", "30"])
    _, answers = burst(server)
    timed_out = [a for a in answers if a.status != 200]
    assert timed_out, "no execution waited past 30 ms: the test shows nothing"
    for a in timed_out:
        assert a.status == 503, (a.status, a.error_message())
        text = a.error_message()
        assert "waited" in text and "its deadline came first" in text, text
        assert "Held on cpu:" in text and "server/model:burst/version:1" in text, text


def learned(report, model="burst"):
    version = next((n for n in walk(report["owners"])
                    if n["path"] == "server/model:%s/version:1" % model), None)
    return version is not None and version.get("execution_peaks")


def walk(node):
    yield node
    for child in node["children"]:
        yield from walk(child)


def test_a_burst_at_a_fast_model_is_answered_whole_through_the_inline_path(start_server,
                                                                          tmp_path_factory):
    # Executions this short run inline, on the HTTP thread that received them, when memory
    # admits them at once; one that would have to wait is handed to the instance threads.
    repo = tmp_path_factory.mktemp("admission-fast-repo")
    (repo / "quick" / "1").mkdir(parents=True)
    (repo / "quick" / "config.pbtxt").write_text(CONFIG.replace(
        'parameters { key: "execute_delay_us" value { string_value: "100000" } }', ""))
    server = start_server([repo], ["--backend-directory", TEST_BACKENDS_DIR,
                                   "--memory-budget", "cpu=1.25MiB"],
                          name="admission-fast", ready_models=["quick"])
    values = np.arange(SCRATCH // 4, dtype=np.float32)
    answers = [[] for _ in range(BURST)]
    go = threading.Barrier(BURST)

    def send(i):
        c = server.client()
        try:
            go.wait()
            for round_ in range(20):
                answers[i].append((round_, c.infer_raw(
                    "quick", [Input("INPUT0", "FP32", values + i + round_, binary=True)])))
        finally:
            c.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(BURST)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, rounds in enumerate(answers):
        assert len(rounds) == 20
        for round_, a in rounds:
            assert a.status == 200, (a.status, a.error_message())
            np.testing.assert_array_equal(InferResult(a).outputs["OUTPUT0"], values + i + round_)
    client = server.client()
    try:
        report = client.get("/v2/memory").json()
    finally:
        client.close()
    (budget,) = report["owners"]["quota"]
    assert budget["refusals"] == 0, budget
    (admission,) = report["admission"]
    assert admission["admitted"] == BURST * 20, admission


def test_device_free_admission_leaves_the_host_and_budgetless_serving_alone(start_server,
                                                                            tmp_path_factory):
    # --memory-admission-device-free admits GPUs without a budget against their free memory
    # (covered by AdmissionTest and tests/device/admission_gpu_check.py --mode free). The host
    # is never admitted that way: with no budget, a CPU model's burst runs as before, all of it
    # at once, and the memory report lists no admitted device.
    repo = tmp_path_factory.mktemp("free-repo")
    (repo / "burst" / "1").mkdir(parents=True)
    (repo / "burst" / "config.pbtxt").write_text(CONFIG)
    server = start_server([repo], ["--backend-directory", TEST_BACKENDS_DIR,
                                   "--memory-admission-device-free=true"],
                          name="free", ready_models=["burst"])
    values, answers = burst(server)
    assert_all_answered(values, answers)
    client = server.client()
    try:
        report = client.get("/v2/memory").json()
        assert report["admission"] == [], report["admission"]
    finally:
        client.close()
    bad = start_server([repo], ["--backend-directory", TEST_BACKENDS_DIR,
                                "--memory-admission-device-free=maybe"],
                       name="free-bad", launch_only=True)
    assert bad.wait() != 0
    assert "--memory-admission-device-free" in bad.log(), bad.log()


BATCHED_CONFIG = """
backend: "echo_c"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
dynamic_batching { max_queue_delay_microseconds: 300000 preferred_batch_size: [ 8 ] }
"""


def test_a_batch_that_could_never_fit_is_split_into_executions_that_do(start_server,
                                                                         tmp_path_factory):
    # One request makes a 256 KiB scratch copy (its input), so a batch of 8 joined into one
    # execution is predicted to make 2 MiB, past the 1.25 MiB budget whoever else runs. It is
    # split into executions of sizes whose peaks were learned and fit (here only single
    # requests: a joined batch's output of 1 MiB or more also comes from the pool, which no
    # figure scaled up from one request foresees), run one after the other, and every request
    # is answered.
    repo = tmp_path_factory.mktemp("split-repo")
    (repo / "batched" / "1").mkdir(parents=True)
    (repo / "batched" / "config.pbtxt").write_text(BATCHED_CONFIG)
    server = start_server([repo], ["--backend-directory", TEST_BACKENDS_DIR,
                                   "--memory-budget", "cpu=1.25MiB"],
                          name="split", ready_models=["batched"])
    values, answers = burst(server, "batched",
                            np.arange(64 * 1024, dtype=np.float32).reshape(1, -1))  # 256 KiB
    assert_all_answered(values, answers)
    client = server.client()
    try:
        report = client.get("/v2/memory").json()
        (admission,) = report["admission"]
        assert admission["splits"] >= 1, admission
        (budget,) = report["owners"]["quota"]
        assert budget["refusals"] == 0, budget
        version = next(n for n in walk(report["owners"])
                       if n["path"] == "server/model:batched/version:1")
        assert max(p["batch_size"] for p in version["execution_peaks"]) < BURST, version
    finally:
        client.close()
