"""Shared end-to-end helpers: the vramd process wrapper and fixture-repository lookups.

See conftest.py for the environment variables.
"""

import json
import os
import pathlib
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import urllib.request
import urllib.error

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from v2client import InferResult, Input, V2Client  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
SOURCE_DIR = pathlib.Path(os.environ.get("VRAMD_SOURCE_DIR", HERE.parent.parent)).resolve()
VRAMD_BIN = pathlib.Path(os.environ.get("VRAMD_BIN", "/work/main/build/src/cli/vramd"))
FIXTURE_REPO = SOURCE_DIR / "tests" / "fixtures" / "models"
# The python backend: VRAMD_PYTHON_BACKEND_DIR (a directory holding python/libvramd_python.so
# and vramd_backend_host), else <build>/backends beside VRAMD_BIN.
PYTHON_BACKEND_DIR = pathlib.Path(os.environ.get("VRAMD_PYTHON_BACKEND_DIR")
                                  or (VRAMD_BIN.resolve().parent.parent.parent / "backends"))
PYTHON_LIBRARY = PYTHON_BACKEND_DIR / "python" / "libvramd_python.so"
BACKEND_HOST = PYTHON_BACKEND_DIR / "vramd_backend_host"
# Test backends loaded through the C ABI (tests/backends; set by tests/CMakeLists.txt).
TEST_BACKENDS_DIR = os.environ.get("VRAMD_TEST_BACKENDS_DIR")
ECHO_LIBRARY = pathlib.Path(TEST_BACKENDS_DIR or ".") / "echo_c" / "libvramd_echo_c.so"
needs_echo_c = pytest.mark.skipif(
    not TEST_BACKENDS_DIR or not ECHO_LIBRARY.is_file(),
    reason="VRAMD_TEST_BACKENDS_DIR is not set or holds no echo_c/libvramd_echo_c.so "
           "(build the vramd_backend_echo_c target and run through ctest)")


# The Python modules protoc generates from vramd's grpc_service.proto: VRAMD_GRPC_PYTHON_DIR,
# else <build>/python beside VRAMD_BIN.
GRPC_PYTHON_DIR = pathlib.Path(os.environ.get("VRAMD_GRPC_PYTHON_DIR")
                               or (VRAMD_BIN.resolve().parent.parent.parent / "python"))


def grpc_modules():
    """(grpc, grpc_service_pb2, grpc_service_pb2_grpc), or a skip of the calling test naming
    what is missing."""
    grpc = pytest.importorskip("grpc", reason="python3-grpcio is not installed")
    if not (GRPC_PYTHON_DIR / "server" / "grpc" / "grpc_service_pb2.py").is_file():
        pytest.skip("no generated gRPC stubs at %s (build vramd, or set VRAMD_GRPC_PYTHON_DIR)"
                    % GRPC_PYTHON_DIR)
    if str(GRPC_PYTHON_DIR) not in sys.path:
        sys.path.insert(0, str(GRPC_PYTHON_DIR))
    from server.grpc import grpc_service_pb2 as pb
    from server.grpc import grpc_service_pb2_grpc as pb_grpc
    return grpc, pb, pb_grpc


def skip_module_without_python_backend(host=False):
    """Skips the calling test module when libvramd_python.so (with `host`, also
    vramd_backend_host) is not built."""
    if not PYTHON_LIBRARY.is_file():
        pytest.skip("no python backend at %s (build vramd_backend_python, or set "
                    "VRAMD_PYTHON_BACKEND_DIR)" % PYTHON_LIBRARY, allow_module_level=True)
    if host and not BACKEND_HOST.is_file():
        pytest.skip("no backend host at %s" % BACKEND_HOST, allow_module_level=True)

def copy_model(source, repo, name, parameters=None):
    """Copies the model folder `source` into `repo` as `name`: its config's name set to `name`,
    each of `parameters` (a dict) appended as a string parameter. Returns the new folder."""
    target = pathlib.Path(repo) / name
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    config = target / "config.pbtxt"
    text = re.sub(r'^name: "[^"]*"', 'name: "%s"' % name, config.read_text(), count=1,
                  flags=re.M)
    for key, value in (parameters or {}).items():
        text += 'parameters { key: "%s" value { string_value: "%s" } }\n' % (key, value)
    config.write_text(text)
    return target


LISTEN_RE = re.compile(r"HTTP listening on (\[[^\]]+\]|[^\s:]+):(\d+)")
GRPC_LISTEN_RE = re.compile(r"gRPC listening on (\S+):(\d+)")
# Signs that the process died or misbehaved in a way a clean exit code would not show.
CRASH_MARKERS = [
    "Segmentation fault",
    "AddressSanitizer",
    "LeakSanitizer",
    "ThreadSanitizer",
    "runtime error:",  # UBSan
    "terminate called",
    "Assertion `",
    "stack smashing",
    "end of crash report",  # core/crash_report.h, from vramd or a backend host
    "double free",
    "free(): invalid",
]

START_TIMEOUT_S = float(os.environ.get("VRAMD_E2E_START_TIMEOUT", "60"))
STOP_TIMEOUT_S = 30.0


class VramdProcess:
    """One vramd process. Use start(); then .port, .client(), .stop()."""

    def __init__(self, repos, log_dir, extra_args=(), name="vramd", port=0, ready_models=None,
                 preexec_fn=None):
        """`ready_models`: when given, start() waits for /v2/health/live and for each of these
        models' /ready instead of /v2/health/ready (which strict readiness keeps at 400 while
        any model of the repository failed to load). `preexec_fn` runs in the child before
        exec (e.g. to lower its resource limits)."""
        self.preexec_fn = preexec_fn
        self.repos = [str(r) for r in repos]
        self.requested_port = port
        self.ready_models = list(ready_models) if ready_models is not None else None
        self.extra_args = list(extra_args)
        self.log_dir = pathlib.Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.stderr_path = self.log_dir / (name + ".stderr.log")
        self.stdout_path = self.log_dir / (name + ".stdout.log")
        self.proc = None
        self.host = "127.0.0.1"
        self.port = None
        self._clients = []

    def argv(self):
        argv = [str(VRAMD_BIN), "serve"]
        for r in self.repos:
            argv += ["--model-repository", r]
        argv += ["--http-port", str(self.requested_port), "--http-address", "127.0.0.1",
                 "--metrics-port", "0", "--grpc-port", "0", "--grpc-address", "127.0.0.1"]
        if os.environ.get("VRAMD_E2E_LOG_VERBOSE"):
            argv += ["--log-verbose", os.environ["VRAMD_E2E_LOG_VERBOSE"]]
        return argv + self.extra_args

    def launch(self):
        if not VRAMD_BIN.exists():
            pytest.fail("vramd binary not found at %s (set VRAMD_BIN)" % VRAMD_BIN)
        self._err = open(self.stderr_path, "wb")
        self._out = open(self.stdout_path, "wb")
        self.proc = subprocess.Popen(self.argv(), stdout=self._out, stderr=self._err,
                                     stdin=subprocess.DEVNULL, preexec_fn=self.preexec_fn)
        return self

    def start(self, wait_ready=True, timeout=START_TIMEOUT_S):
        self.launch()
        self.wait_listening(timeout)
        if wait_ready:
            self.wait_ready(timeout)
        return self

    def log(self):
        """Everything the server wrote so far (stderr then stdout)."""
        text = ""
        for p in (self.stderr_path, self.stdout_path):
            try:
                text += p.read_text(errors="replace")
            except FileNotFoundError:
                pass
        return text

    def stderr_text(self):
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def describe(self, tail=4000):
        return "%s\n--- %s log tail ---\n%s" % (" ".join(self.argv()), self.name,
                                                self.log()[-tail:])

    def wait_listening(self, timeout=START_TIMEOUT_S):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # The spec puts this line on stderr (test_lifecycle.py checks that); the port is
            # taken from either stream so that one misplaced log line does not fail every test.
            m = LISTEN_RE.search(self.log())
            if m:
                self.port = int(m.group(2))
                assert self.port > 0, "server announced port 0"
                return self.port
            if self.proc.poll() is not None:
                raise AssertionError("vramd exited with %s before listening\n%s"
                                     % (self.proc.returncode, self.describe()))
            time.sleep(0.05)
        raise AssertionError("no 'HTTP listening on <addr>:<port>' line in the log within %.0fs\n%s"
                             % (timeout, self.describe()))

    def grpc_port(self, timeout=START_TIMEOUT_S):
        """The gRPC port from the 'gRPC listening on <addr>:<port>' line (logged before HTTP's)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = GRPC_LISTEN_RE.search(self.log())
            if m:
                return int(m.group(2))
            if self.proc.poll() is not None:
                raise AssertionError("vramd exited with %s before listening for gRPC\n%s"
                                     % (self.proc.returncode, self.describe()))
            time.sleep(0.05)
        raise AssertionError("no 'gRPC listening on' line within %.0fs\n%s"
                             % (timeout, self.describe()))

    def _wait_200(self, path, deadline):
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("vramd exited with %s before %s was 200\n%s"
                                     % (self.proc.returncode, path, self.describe()))
            try:
                with urllib.request.urlopen("http://%s:%d%s" % (self.host, self.port, path),
                                            timeout=5) as r:
                    if r.status == 200:
                        return
                    last = r.status
            except urllib.error.HTTPError as e:
                last = "%d %r" % (e.code, e.read()[:200])
            except OSError as e:
                last = repr(e)
            time.sleep(0.1)
        raise AssertionError("%s not 200 in time (last: %s)\n%s" % (path, last, self.describe()))

    def wait_ready(self, timeout=START_TIMEOUT_S):
        deadline = time.monotonic() + timeout
        if self.ready_models is None:
            self._wait_200("/v2/health/ready", deadline)
            return
        self._wait_200("/v2/health/live", deadline)
        for m in self.ready_models:
            self._wait_200("/v2/models/%s/ready" % m, deadline)

    def client(self, timeout=30.0):
        c = V2Client(self.host, self.port, timeout=timeout)
        self._clients.append(c)
        return c

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def send_signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout=STOP_TIMEOUT_S):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            threads = self._thread_states()
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("vramd did not exit within %.0fs of the signal\n%s\n"
                                 "--- its threads (name, state, kernel wait channel) ---\n%s"
                                 % (timeout, self.describe(), threads))
        finally:
            self._close_files()

    def _thread_states(self):
        """Where a server that does not stop is stuck, without a debugger: each thread's name,
        state and the kernel function it sleeps in."""
        lines = []
        task_dir = "/proc/%d/task" % self.proc.pid
        try:
            tids = sorted(os.listdir(task_dir), key=int)
        except OSError as e:
            return "(cannot list threads: %s)" % e
        for tid in tids:
            def read(name):
                try:
                    with open(os.path.join(task_dir, tid, name)) as f:
                        return f.read().strip()
                except OSError:
                    return "?"
            stat = read("stat")
            state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else "?"
            lines.append("%s %-16s %s %s" % (tid, read("comm"), state, read("wchan")))
        return "\n".join(lines)

    def stop(self, sig=signal.SIGTERM, timeout=STOP_TIMEOUT_S):
        """Signals the server, waits, and returns its exit code."""
        for c in self._clients:
            c.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait(timeout)

    def kill(self):
        """For cleanup after a failed test; never used to judge the server."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close_files()

    def _close_files(self):
        for f in (getattr(self, "_err", None), getattr(self, "_out", None)):
            if f is not None and not f.closed:
                f.close()

    def assert_no_crash_markers(self):
        text = self.log()
        found = [m for m in CRASH_MARKERS if m in text]
        assert not found, "crash markers %s in the server log\n%s" % (found, self.describe())

    def assert_clean_exit(self, code):
        assert code is not None
        assert code >= 0, "vramd was killed by signal %d\n%s" % (-code, self.describe())
        assert code == 0, "vramd exited with %d (expected 0)\n%s" % (code, self.describe())
        self.assert_no_crash_markers()


# ------------------------------------------------------------------------------------------------
# Reading the fixture repository (without asking the server), to find models by their traits.


def read_config(model_dir):
    p = pathlib.Path(model_dir) / "config.pbtxt"
    return p.read_text() if p.exists() else ""


def model_dirs(repo=FIXTURE_REPO):
    if not pathlib.Path(repo).is_dir():
        return []
    return sorted(p for p in pathlib.Path(repo).iterdir() if p.is_dir())


def find_model(predicate, repo=FIXTURE_REPO):
    """Name of the first fixture model whose config.pbtxt text satisfies `predicate`."""
    for d in model_dirs(repo):
        if predicate(d.name, read_config(d)):
            return d.name
    return None


def batching_identity_name():
    def pred(name, text):
        return (re.search(r"max_batch_size\s*:\s*4\b", text) is not None
                and "identity" in (name + text).lower() and "broken" not in name)
    return find_model(pred)


def optional_input_model_name():
    return find_model(lambda name, text: re.search(r"optional\s*:\s*true", text) is not None
                      and "broken" not in name)


def loadable_fixture_models(repo=FIXTURE_REPO):
    """Fixture models expected to load (all but the deliberately broken ones)."""
    return [d.name for d in model_dirs(repo) if not d.name.startswith("broken")]


def require_model(name, what):
    if name is None or not (FIXTURE_REPO / name).is_dir():
        pytest.fail("fixture model for %s is missing from %s" % (what, FIXTURE_REPO))
    return name


# ------------------------------------------------------------------------------------------------
# Polling the server, and model-control views (repository index, lifecycle).


def in_background(fn):
    """Runs fn() on a daemon thread; returns (thread, result) where result gets "value" or
    "error" once it ends."""
    result = {}

    def run():
        try:
            result["value"] = fn()
        except BaseException as e:  # noqa: BLE001
            result["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, result


def rss_bytes(pid):
    """The resident set of process `pid`, in bytes (/proc/PID/status)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS for pid %d" % pid)


def wait_for(predicate, timeout=10.0, interval=0.05, what="the condition"):
    """Calls `predicate` until it returns something truthy, and returns that. Raises
    AssertionError naming `what` (a string, or a callable giving the last state) on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            desc = what() if callable(what) else what
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, desc))
        time.sleep(interval)


def repository_index(client, ready=None):
    """POST /v2/repository/index; the rows as a list."""
    body = b"{}" if ready is None else json.dumps({"ready": ready}).encode()
    r = client.post("/v2/repository/index", body, {"Content-Type": "application/json"})
    assert r.status == 200, r
    return r.json()


def index_rows(client, model):
    return [row for row in repository_index(client) if row["name"] == model]


def model_lifecycle(client, model):
    """GET /v2/repository/models/{m}/lifecycle as a dict (asserts 200)."""
    r = client.get("/v2/repository/models/%s/lifecycle" % model)
    assert r.status == 200, r
    return r.json()


def model_config(client, model):
    r = client.get("/v2/models/%s/config" % model)
    assert r.status == 200, r
    return r.json()


def load_model(client, model, config=None, parameters=None):
    """POST /v2/repository/models/{m}/load; `config` (a dict or a JSON string) goes in
    parameters.config. Returns the Response."""
    params = dict(parameters or {})
    if config is not None:
        params["config"] = config if isinstance(config, str) else json.dumps(config)
    body = json.dumps({"parameters": params}).encode() if params else b""
    return client.post("/v2/repository/models/%s/load" % model, body,
                       {"Content-Type": "application/json"})


# ------------------------------------------------------------------------------------------------
# "affine" models for the built-in mlp backend, written by the tests: one dense layer,
# OUTPUT0 = INPUT0 + offset (weight = identity, bias = offset everywhere). Giving each version
# its own offset (affine_offset) makes every answer say which version computed it.

AFFINE_WIDTH = 4


def affine_offset(version):
    return 100.0 * int(version)


def safetensors_bytes(tensors):
    """A safetensors file (8-byte little-endian header size, JSON header padded to 8 bytes,
    raw little-endian data) holding `tensors`: a list of (name, float32 numpy array)."""
    header, offset = {}, 0
    for name, array in tensors:
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return (struct.pack("<Q", len(text)) + text
            + b"".join(np.ascontiguousarray(a, dtype="<f4").tobytes() for _, a in tensors))


def affine_weights(version, width=AFFINE_WIDTH):
    """The model.safetensors bytes of an affine version."""
    return safetensors_bytes([
        ("layers.0.weight", np.eye(width, dtype=np.float32)),
        ("layers.0.bias", np.full(width, affine_offset(version), dtype=np.float32)),
    ])


def affine_config_text(name, version_policy="", width=AFFINE_WIDTH, extra=""):
    return """name: "%s"
backend: "mlp"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ %d ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ %d ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
%s
%s
""" % (name, width, width, version_policy, extra)


def write_affine_model(model_dir, versions, name=None, version_policy=""):
    """Writes config.pbtxt and <v>/model.safetensors for each of `versions`."""
    model_dir = pathlib.Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(
        affine_config_text(name or model_dir.name, version_policy))
    for v in versions:
        write_affine_version(model_dir / str(v), v)
    return model_dir


def write_affine_version(version_dir, version):
    version_dir = pathlib.Path(version_dir)
    version_dir.mkdir(parents=True, exist_ok=True)
    (version_dir / "model.safetensors").write_bytes(affine_weights(version))


def affine_infer(client, model, version=None, rows=1, seed=None):
    """Infers once; returns (model_version as int, input, output), after checking that the
    output is the input plus the offset of the version the response names."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-50, 50, size=(rows, AFFINE_WIDTH)).astype(np.float32)
    r = client.infer_raw(model, [Input("INPUT0", "FP32", x)], version=version)
    assert r.status == 200, "infer %s: HTTP %d %r" % (model, r.status, r.body[:500])
    res = InferResult(r)
    v = int(res.json["model_version"])
    y = res.outputs["OUTPUT0"]
    np.testing.assert_array_equal(y, x + np.float32(affine_offset(v)),
                                  err_msg="the output is not that of version %d" % v)
    return v, x, y
