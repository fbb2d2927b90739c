"""Helpers shared by memory_compare.py and throughput_compare.py: child processes that are always
cleaned up, a vramd server, HTTP calls, NVML readings, JSON results. Standard library only (plus
pynvml where NVML is read)."""
import atexit
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MIB = 1024 * 1024

_children = []  # Popen objects started here, stopped on exit whatever happens


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def spawn(cmd, **kw):
    """Popen in its own process group, remembered for cleanup."""
    kw.setdefault("start_new_session", True)
    p = subprocess.Popen(cmd, **kw)
    _children.append(p)
    return p


def stop(p, timeout=15.0, sig=signal.SIGTERM):
    """Stops one child (and its process group): signal, wait, then SIGKILL. Returns its code."""
    if p is None:
        return None
    if p.poll() is None:
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            try:
                p.send_signal(sig)
            except ProcessLookupError:
                pass
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            log(f"pid {p.pid} did not stop in {timeout:.0f}s; killing it")
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                p.kill()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
    for s in (p.stdin, p.stdout, p.stderr):
        try:
            if s:
                s.close()
        except OSError:
            pass
    if p in _children:
        _children.remove(p)
    return p.returncode


def stop_all():
    for p in list(_children):
        stop(p, timeout=10)


def _on_signal(signum, frame):
    stop_all()
    sys.exit(128 + signum)


atexit.register(stop_all)
signal.signal(signal.SIGTERM, _on_signal)
signal.signal(signal.SIGINT, _on_signal)


def call(port, method, path, body=None, headers=None, timeout=300):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        return r.status, r.read(), dict(r.getheaders())
    finally:
        conn.close()


class Vramd:
    """A vramd server on a free port (--http-port 0, port read from its log)."""

    def __init__(self, binary, repos, log_path, backend_dir=None, args=(), timeout=120):
        self.log_path = log_path
        self.logf = open(log_path, "ab")
        self.logf.write(f"\n# vramd {' '.join(args)}\n".encode())
        self.logf.flush()
        start_offset = self.logf.tell()
        cmd = [binary, "serve", "--http-port", "0", "--grpc-port", "0", "--no-allow-metrics"]
        for r in repos:
            cmd += ["--model-repository", r]
        if backend_dir:
            cmd += ["--backend-directory", backend_dir]
        cmd += list(args)
        log("starting:", " ".join(cmd))
        self.proc = spawn(cmd, stdout=self.logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid
        self.port = None
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vramd exited with {self.proc.returncode} at start-up:\n"
                                   + self.tail())
            with open(log_path, "rb") as f:
                f.seek(start_offset)
                m = re.search(rb"HTTP listening on [^\s:]*:(\d+)", f.read())
            if m:
                self.port = int(m.group(1))
                try:
                    status, _, _ = call(self.port, "GET", "/v2/health/live", timeout=5)
                    if status == 200:
                        return
                except OSError:
                    pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"vramd did not come up in {timeout}s:\n" + self.tail())

    def tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""

    def ready(self, model, timeout=300):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("vramd exited:\n" + self.tail())
            try:
                status, _, _ = call(self.port, "GET", f"/v2/models/{model}/ready", timeout=5)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"model {model} not ready in {timeout}s:\n" + self.tail())

    def stop(self):
        code = stop(self.proc, timeout=30)
        self.logf.close()
        return code


def infer_load(binary, port, model, body_file, header_length, concurrency, duration, warmup,
               timeout_s=None):
    """Runs bench infer_load; returns its JSON result (a dict), or raises."""
    cmd = [binary, "--port", str(port), "--model", model, "--body-file", body_file,
           "--header-length", str(header_length), "--concurrency", str(concurrency),
           "--duration", str(duration), "--warmup", str(warmup), "--timeout", "60"]
    p = spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = p.communicate(timeout=timeout_s or (duration + warmup + 90))
    except subprocess.TimeoutExpired:
        stop(p)
        raise RuntimeError(f"infer_load c={concurrency} timed out")
    finally:
        if p in _children:
            _children.remove(p)
    lines = [l for l in out.decode().splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError(f"infer_load gave no result (exit {p.returncode}): {err.decode()[-2000:]}")
    res = json.loads(lines[-1])
    if err.strip():
        res["stderr"] = err.decode(errors="replace")[-1000:]
    return res


class Nvml:
    """Device 0's used memory, and the used memory of given pids (None when NVML does not list
    them: e.g. a pid namespace other than the driver's)."""

    def __init__(self, index=0):
        self.index = index
        try:
            import pynvml
        except ImportError:  # nvidia-smi reads the same counters (in MiB)
            log("pynvml is not installed: reading NVML through nvidia-smi")
            self.nv = None
            self.name = self._smi("--query-gpu=name")[0][0]
            self.total = int(self._smi("--query-gpu=memory.total")[0][0]) * MIB
            return
        self.nv = pynvml
        pynvml.nvmlInit()
        self.h = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.name = pynvml.nvmlDeviceGetName(self.h)
        if isinstance(self.name, bytes):
            self.name = self.name.decode()
        self.total = pynvml.nvmlDeviceGetMemoryInfo(self.h).total

    def _smi(self, query):
        out = subprocess.run(["nvidia-smi", "-i", str(self.index), query,
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=30, check=True).stdout
        return [[f.strip() for f in line.split(",")] for line in out.splitlines() if line.strip()]

    def device_used(self):
        if self.nv is None:
            return int(self._smi("--query-gpu=memory.used")[0][0]) * MIB
        return int(self.nv.nvmlDeviceGetMemoryInfo(self.h).used)

    def processes(self):
        out = {}
        if self.nv is None:
            for row in self._smi("--query-compute-apps=pid,used_memory"):
                try:
                    out[int(row[0])] = out.get(int(row[0]), 0) + int(row[1]) * MIB
                except (ValueError, IndexError):
                    pass
            return out
        for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                for p in getattr(self.nv, fn)(self.h):
                    used = p.usedGpuMemory
                    if used is not None:
                        out[int(p.pid)] = out.get(int(p.pid), 0) + int(used)
            except Exception:  # noqa: BLE001 (old drivers / bindings)
                pass
        return out

    def pids_used(self, pids):
        procs = self.processes()
        if not all(p in procs for p in pids):
            return None
        return sum(procs[p] for p in pids)

    def settle(self, baseline, tolerance=64 * MIB, timeout=30.0):
        """Waits until device used memory is back within tolerance of baseline."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.device_used() <= baseline + tolerance:
                return True
            time.sleep(0.25)
        return False


def fit_slope(xs, ys):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0


def update_json(path, key, value):
    data = {}
    if path and os.path.exists(path):
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            data = {}
    data[key] = value
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)


def figure(name, value, unit):
    print(f"FIGURE {name} {value:.6g} {unit}" if isinstance(value, float)
          else f"FIGURE {name} {value} {unit}", flush=True)


def verdict(ok, text):
    print(("PASS " if ok else "FAIL ") + text, flush=True)
    return ok
