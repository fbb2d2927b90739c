"""The Python side of vramd's in-process Python backend (libvramd_python.so).

Not for models: the backend imports it once, when it starts the interpreter, and calls it to

  - give each model version a package of its own (``_vramd_models.<model>_v<version>``, whose
    ``__path__`` is the version directory, then the model directory), so that two models with a
    ``util.py`` each import their own, and ``from . import util`` works as in Triton;
  - run coroutines (``async def execute``) on one event loop per instance, in a thread of its
    own, as Triton's stub does.

Absolute imports of a model's own files. Triton puts the version and model directories on
``sys.path`` of the model's own process, so ``import util`` finds the model's util.py. Here every
model shares one ``sys.modules``; so ``builtins.__import__`` is wrapped: an absolute import made
by code of a model's package (the importer's ``__name__`` is under ``_vramd_models.<pkg>``)
whose first name is a file or package of that model's directories, and not a module the
interpreter finds by itself (standard library, site-packages: those win, as they win on
Triton's ``sys.path``), is imported as ``_vramd_models.<pkg>.<name>``, i.e. relative to the
model's package. The modules land in ``sys.modules`` under the package's names only, so no
model ever sees another's. ``importlib.import_module("util")`` is not redirected (it does not
go through ``__import__``).
"""

import builtins
import collections.abc
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
import threading
import traceback
import types

ROOT = "_vramd_models"

# The interpreter's own search path when the backend started, before any model ran (a model
# may append its directories to sys.path, and another model must not then find them).
_BASE_PATH = list(sys.path)
# package name -> frozenset of the top-level names its model directories provide
_LOCAL_NAMES = {}
_original_import = builtins.__import__


def _is_identifier(name):
    return name.isidentifier()


def _found_elsewhere(name):
    """Whether the interpreter imports `name` without the model's directories."""
    if name in sys.builtin_module_names:
        return True
    try:
        if importlib.machinery.FrozenImporter.find_spec(name) is not None:
            return True
    except Exception:
        pass
    try:
        return importlib.machinery.PathFinder.find_spec(name, _BASE_PATH) is not None
    except Exception:
        return False


def _local_names(directories):
    names = set()
    for directory in directories:
        try:
            entries = os.listdir(directory)
        except OSError:
            continue
        for entry in entries:
            path = os.path.join(directory, entry)
            if entry.endswith(".py") and os.path.isfile(path):
                stem = entry[:-3]
            elif os.path.isdir(path) and os.path.isfile(os.path.join(path, "__init__.py")):
                stem = entry
            else:
                continue
            if _is_identifier(stem) and not _found_elsewhere(stem):
                names.add(stem)
    return frozenset(names)


def _model_import(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0 and globals is not None and name:
        importer = globals.get("__name__")
        if isinstance(importer, str) and importer.startswith(ROOT + "."):
            parts = importer.split(".", 2)
            package = parts[0] + "." + parts[1]
            local = _LOCAL_NAMES.get(package)
            if local and name.partition(".")[0] in local:
                return _original_import(
                    name, {"__name__": package, "__package__": package}, locals, fromlist, 1)
    return _original_import(name, globals, locals, fromlist, level)


def _install():
    if ROOT not in sys.modules:
        root = types.ModuleType(ROOT)
        root.__path__ = []
        root.__package__ = ROOT
        sys.modules[ROOT] = root
    if builtins.__import__ is not _model_import:
        builtins.__import__ = _model_import


_install()


def sanitize(text):
    cleaned = re.sub(r"[^0-9A-Za-z_]", "_", text)
    if not cleaned or cleaned[0].isdigit():
        cleaned = "m_" + cleaned
    return cleaned


def create_package(model_name, version, version_dir, model_dir):
    """Makes the package of one model version; returns its name (unique in this process)."""
    base = "{}.{}_v{}".format(ROOT, sanitize(model_name), int(version))
    name = base
    generation = 1
    while name in sys.modules or name in _LOCAL_NAMES:
        generation += 1
        name = "{}_{}".format(base, generation)
    directories = [version_dir, model_dir]
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = list(directories)
    package = importlib.util.module_from_spec(spec)
    package.__path__ = list(directories)
    package.__file__ = None
    sys.modules[name] = package
    setattr(sys.modules[ROOT], name.rsplit(".", 1)[1], package)
    _LOCAL_NAMES[name] = _local_names(directories)
    return name


def import_model(package, file_name):
    """Imports <package>.<stem of file_name>; returns the module."""
    stem = file_name[:-3] if file_name.endswith(".py") else file_name
    return importlib.import_module(package + "." + stem)


def remove_package(package):
    """Forgets a model version's modules (at model_destroy)."""
    _LOCAL_NAMES.pop(package, None)
    prefix = package + "."
    for key in [k for k in list(sys.modules) if k == package or k.startswith(prefix)]:
        sys.modules.pop(key, None)
    root = sys.modules.get(ROOT)
    if root is not None:
        try:
            delattr(root, package.rsplit(".", 1)[1])
        except AttributeError:
            pass


def package_on_stack(depth=1):
    """The model package whose code called (the nearest frame under _vramd_models), or None."""
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return None
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if isinstance(name, str) and name.startswith(ROOT + "."):
            parts = name.split(".", 2)
            return parts[0] + "." + parts[1]
        frame = frame.f_back
    return None


def caller_location(depth=1):
    """'file.py:line' of the nearest frame outside this backend's modules."""
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return ""
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name not in (__name__, "triton_python_backend_utils"):
            return "{}:{}".format(os.path.basename(frame.f_code.co_filename), frame.f_lineno)
        frame = frame.f_back
    return ""


def format_exception(error):
    """The whole traceback of `error`, as traceback.format_exception writes it."""
    return "".join(traceback.format_exception(type(error), error, error.__traceback__))


def is_coroutine(value):
    # What asyncio.iscoroutine answers for a model's execute, without importing asyncio: that
    # import is a tenth of a stub host's start-up, and most models never return a coroutine.
    return isinstance(value, collections.abc.Coroutine)


class InstanceLoop:
    """One instance's asyncio event loop, run forever in a daemon thread (Triton's stub has one
    per instance too). `bind` runs first on that thread (it sets the instance's context)."""

    def __init__(self, name, bind):
        import asyncio  # on first use: see is_coroutine
        self._asyncio = asyncio
        self._loop = asyncio.new_event_loop()
        self._futures = set()
        self._started = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(bind,), name="vramd-asyncio-" + name, daemon=True)
        self._thread.start()
        self._started.wait()

    def _run(self, bind):
        bind()
        self._asyncio.set_event_loop(self._loop)
        self._started.set()
        self._loop.run_forever()

    @property
    def loop(self):
        return self._loop

    def run(self, coroutine):
        """Runs `coroutine` to completion and returns its result (raises its exception)."""
        return self._asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def submit(self, coroutine, on_error):
        """Runs `coroutine` in the background; `on_error(text)` gets a failure's traceback."""
        future = self._asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        self._futures.add(future)

        def done(f):
            self._futures.discard(f)
            if f.cancelled():
                return
            error = f.exception()
            if error is not None:
                on_error(format_exception(error))

        future.add_done_callback(done)

    def stop(self):
        """Stops the loop (background coroutines still pending are dropped) and joins it."""
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()


# torch's CUDA memory through vramd's ledger (torch_ledger.h): one CUDAPluggableAllocator over
# libvramd_python.so's vramd_torch_malloc / vramd_torch_free for the process, one MemPool over it
# per KIND_GPU instance.
_torch_allocator = None


class _RawStream:
    """A non-blocking CUDA stream made with the CUDA runtime torch loaded (cudaStreamCreate-
    WithFlags). Not torch.cuda.Stream(): the first of those on a device makes torch's stream
    pool (32 streams per priority), which took 70 MiB of the H200's memory in a process
    (docs/benchmarks.md), for one stream per instance. Never destroyed: an instance's stream
    goes back to a free list per device for the next instance, since memory torch still holds
    (a tensor a model kept past its instance) names the stream it was made on, and the
    ledger's free waits for that stream (torch_ledger.cc). None when the runtime's functions
    are not found: torch's pool stream then."""

    _create = None
    _free = {}  # device index -> [torch.cuda.ExternalStream]

    @classmethod
    def make(cls, torch, index):
        if cls._create is None:
            import ctypes
            try:
                create = ctypes.CDLL(None).cudaStreamCreateWithFlags  # torch's libcudart
            except AttributeError:
                cls._create = False
            else:
                create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
                cls._create = (ctypes, create)
        free = cls._free.setdefault(index, [])
        if free:
            return cls(index, free.pop())
        if not cls._create:
            return None
        ctypes, create = cls._create
        handle = ctypes.c_void_p()
        with torch.cuda.device(index):
            if create(ctypes.byref(handle), 1) != 0:  # 1: cudaStreamNonBlocking
                return None
        return cls(index, torch.cuda.ExternalStream(handle.value,
                                                    device=torch.device("cuda", index)))

    def __init__(self, index, stream):
        self.index = index
        self.stream = stream

    def __del__(self):
        self._free.setdefault(self.index, []).append(self.stream)


class TorchInstance:
    """What a KIND_GPU instance of a torch model runs under: where the ledger takes torch's
    memory, a MemPool over vramd's allocator; and, unless VRAMD_PYTHON_TORCH_INSTANCE_STREAM is
    off, a CUDA stream of its own, as each Triton instance (a process) has its own default
    stream: threads of one process otherwise share the legacy default stream, whose work runs
    one kernel after another (8 instances of a ResNet-18-like model.py: 890 req/s on it, 2,561
    on their own streams, on the H200; docs/benchmarks.md).

    Entered per call through torch._C's functions rather than torch.cuda.stream() and
    use_mem_pool(): the context managers' Python work runs under the GIL that the instances
    share, and on the H200 they cost 9-18% of 8 threads' forwards/s (bench/python/
    torch_pool_cost.py). Entered per call, not once per thread: a thread left allocating to a
    pool would route whatever else runs on it (the loading thread initializes every model)
    into this instance's pool."""

    def __init__(self, torch, device, pool, stream):
        self._c = torch._C
        self.index = int(device)
        self.pool = pool
        self.pool_id = pool.id if pool is not None else None
        self._stream = None  # owns the stream _stream_ids names
        self._stream_ids = None
        if stream:
            raw = _RawStream.make(torch, self.index)
            s = raw.stream if raw is not None else torch.cuda.Stream(
                device=torch.device("cuda", self.index))
            self._stream = raw if raw is not None else s
            self._stream_ids = (s.stream_id, s.device_index, s.device_type)

    def call(self, fn, *args):
        c = self._c
        restore = ()
        if self._stream_ids is not None:
            current = c._cuda_getDevice()
            restore = [c._cuda_getCurrentStream(current)]
            if current != self.index:  # setting a stream makes its device current
                restore.insert(0, c._cuda_getCurrentStream(self.index))
            c._cuda_setStream(*self._stream_ids)
        try:
            if self.pool_id is None:
                return fn(*args)
            c._cuda_beginAllocateCurrentThreadToPool(self.index, self.pool_id)
            try:
                return fn(*args)
            finally:
                c._cuda_endAllocateToPool(self.index, self.pool_id)
                c._cuda_releasePool(self.index, self.pool_id)
        finally:
            for ids in restore:
                c._cuda_setStream(*ids)


def torch_instance(library, device, want_pool, want_stream=False):
    """(a TorchInstance for cuda:`device`, why it has no MemPool or "") or (None, why not):
    None also when it would hold neither a pool nor a stream."""
    global _torch_allocator
    torch = sys.modules.get("torch")
    if torch is None:
        if importlib.util.find_spec("torch") is None:
            return None, "torch is not installed"
        import torch
    version = getattr(torch, "__version__", "?")
    try:
        cuda = torch.cuda.is_available()
    except Exception as error:  # a broken driver install
        return None, "torch %s cannot use CUDA (%s)" % (version, error)
    if not cuda:
        return None, "torch %s has no CUDA (a CPU-only build, or no device)" % version
    if not want_pool:
        if not want_stream:
            return None, "VRAMD_PYTHON_LEDGER_TORCH is off or the server gives no GPU memory here"
        return TorchInstance(torch, device, None, want_stream), ""
    memory = getattr(torch.cuda, "memory", None)
    if (not hasattr(torch.cuda, "MemPool") or not hasattr(memory, "CUDAPluggableAllocator")
            or not hasattr(torch._C, "_cuda_beginAllocateCurrentThreadToPool")):
        return (TorchInstance(torch, device, None, want_stream) if want_stream else None), (
            "torch %s has no torch.cuda.MemPool / CUDAPluggableAllocator / "
            "_cuda_beginAllocateCurrentThreadToPool (torch >= 2.8 has them)" % version)
    try:
        if _torch_allocator is None:
            _torch_allocator = memory.CUDAPluggableAllocator(
                library, "vramd_torch_malloc", "vramd_torch_free")
        with torch.cuda.device(int(device)):  # a MemPool belongs to the current device
            pool = torch.cuda.MemPool(_torch_allocator.allocator())
    except Exception as error:
        # E.g. another user of the process's LibTorch (the pytorch backend) replaced its
        # allocator: "pluggable does not yet support createOrIncrefPool".
        why = "torch %s refused vramd's allocator: %s: %s" % (version, type(error).__name__, error)
        return (TorchInstance(torch, device, None, want_stream) if want_stream else None), why
    return TorchInstance(torch, device, pool, want_stream), ""
