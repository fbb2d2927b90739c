"""Triton's EXECUTION_ENV_PATH on a python model (src/backends/remote/execution_env.h,
docs/remote-backends.md): the model runs in a vramd_backend_host process whose Python is the
env's, and imports a module that only the env has. The env here is built from this machine's
own Python (its standard library and numpy linked in, a marker module of its own), as a
directory under the model ("$$TRITON_MODEL_DIRECTORY/env") and as a conda-pack style .tar.gz,
unpacked into a private directory that is removed when the model unloads. An env with another
Python than the library's, and an env with in-process hosting asked for, fail that load with
the reason; the rest of the repository serves.

Needs libvramd_python.so and vramd_backend_host; skips when either is missing.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile

import numpy as np
import pytest

from e2e_helpers import (PYTHON_BACKEND_DIR, PYTHON_LIBRARY, copy_model, index_rows,
                         skip_module_without_python_backend, wait_for)
from v2client import Input

HERE = pathlib.Path(__file__).resolve().parent
MODEL = HERE / "python_env_models" / "env_model"
skip_module_without_python_backend(host=True)


def library_python_version():
    """"3.11" from libvramd_python.so's DT_NEEDED libpython3.11.so."""
    out = subprocess.run(["readelf", "-d", str(PYTHON_LIBRARY)], check=True,
                         capture_output=True, text=True).stdout
    found = re.search(r"libpython(3\.\d+)", out)
    assert found, "libvramd_python.so needs no libpython:\n" + out
    return found.group(1)


VERSION = library_python_version()
if VERSION != "%d.%d" % sys.version_info[:2]:
    pytest.skip("the python backend links Python %s and this test runs under %d.%d: the env is "
                "built from the running Python" % ((VERSION,) + sys.version_info[:2]),
                allow_module_level=True)


def make_env(root, marker):
    """An env at `root` holding this Python's standard library (linked), numpy (linked) and a
    module `envmarker` whose WHERE is `marker`, in the site directory that this Python searches
    when its home is `root`."""
    stdlib = pathlib.Path(sysconfig.get_paths()["stdlib"])
    lib = root / "lib" / ("python" + VERSION)
    lib.mkdir(parents=True)
    for entry in stdlib.iterdir():
        if entry.name not in ("site-packages", "dist-packages"):
            (lib / entry.name).symlink_to(entry)
    # Debian's Python searches <home>/lib/python3/dist-packages, upstream's
    # <home>/lib/python3.N/site-packages: ask this Python which, as the host's will see it.
    out = subprocess.run([sys.executable, "-c", "import site; print('\\n'.join(site.getsitepackages()))"],
                         env=dict(os.environ, PYTHONHOME=str(root)), check=True,
                         capture_output=True, text=True).stdout.split()
    packages = next(pathlib.Path(p) for p in out if p.startswith(str(root)))
    packages.mkdir(parents=True, exist_ok=True)
    (packages / "envmarker.py").write_text("WHERE = %r\n" % marker)
    numpy_dir = pathlib.Path(np.__file__).resolve().parent
    (packages / "numpy").symlink_to(numpy_dir)
    for extra in numpy_dir.parent.glob("numpy.libs"):  # wheels keep numpy's own libraries here
        (packages / extra.name).symlink_to(extra)


def add_model(repo, name, parameters):
    return copy_model(MODEL, repo, name, parameters)


@pytest.fixture(scope="module")
def server(start_server, tmp_path_factory):
    repo = tmp_path_factory.mktemp("python-env-repo")
    work = tmp_path_factory.mktemp("python-envs")
    inside = add_model(repo, "env_dir", {"EXECUTION_ENV_PATH": "$$TRITON_MODEL_DIRECTORY/env"})
    make_env(inside / "env", "from the directory env")

    make_env(work / "packed", "from the packed env")
    archive = work / "packed.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for entry in (work / "packed").iterdir():
            tar.add(entry, arcname=entry.name)
    shutil.rmtree(work / "packed")
    add_model(repo, "env_tar", {"EXECUTION_ENV_PATH": str(archive)})

    wrong = work / "wrong"
    (wrong / "lib" / "python3.2").mkdir(parents=True)
    (wrong / "lib" / "python3.2" / "os.py").write_text("")
    add_model(repo, "env_wrong_python", {"EXECUTION_ENV_PATH": str(wrong)})
    add_model(repo, "env_in_process", {"EXECUTION_ENV_PATH": str(archive),
                                       "VRAMD_PYTHON_HOSTING": "in_process"})
    add_model(repo, "env_missing", {"EXECUTION_ENV_PATH": str(work / "nowhere.tar.gz")})
    return start_server([repo], ["--backend-directory", str(PYTHON_BACKEND_DIR),
                                 "--model-control-mode", "explicit", "--load-model", "*"],
                        name="python-env", ready_models=["env_dir", "env_tar"])


def ask(client, model):
    r = client.infer(model, [Input("INPUT0", "FP32", np.array([1.0], dtype=np.float32))])
    where, prefix = [v.decode() if isinstance(v, bytes) else v
                     for v in r.outputs["OUTPUT0"].reshape(-1)]
    return where, prefix, int(r.outputs["OUTPUT1"].reshape(-1)[0])


def test_a_model_runs_in_its_env_in_a_process_of_its_own(server, tmp_path_factory):
    c = server.client()
    where, prefix, pid = ask(c, "env_dir")
    assert where == "from the directory env"
    assert prefix.endswith("/env_dir/env"), prefix
    assert pid != server.proc.pid
    c.close()


def test_a_packed_env_is_unpacked_privately_and_removed_at_unload(server):
    c = server.client()
    where, prefix, pid = ask(c, "env_tar")
    assert where == "from the packed env"
    assert pid != server.proc.pid
    unpacked = pathlib.Path(prefix)
    assert unpacked.name.startswith("vramd-env-") and unpacked.is_dir(), prefix
    r = c.post("/v2/repository/models/env_tar/unload", b"{}")
    assert r.status == 200, r
    wait_for(lambda: not unpacked.exists(), timeout=30, what="%s removed at unload" % unpacked)
    assert not os.path.exists("/proc/%d" % pid) or _is_zombie(pid)
    # Loaded again, it unpacks afresh and serves.
    r = c.post("/v2/repository/models/env_tar/load", b"{}")
    assert r.status == 200, r
    where, again, _ = ask(c, "env_tar")
    assert where == "from the packed env" and again != prefix and pathlib.Path(again).is_dir()
    c.close()


def _is_zombie(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.parametrize("model, reason", [
    ("env_wrong_python", r"has Python 3\.2, but backend library .* was built against Python "
                         + re.escape(VERSION)),
    ("env_in_process", r"is \"in_process\", but EXECUTION_ENV_PATH needs a process of its own"),
    ("env_missing", r"EXECUTION_ENV_PATH '.*nowhere\.tar\.gz'"),
])
def test_an_env_that_cannot_serve_fails_its_load_with_why(server, model, reason):
    c = server.client()
    rows = wait_for(lambda: [r for r in index_rows(c, model) if r["state"] == "UNAVAILABLE"],
                    timeout=30, what="%s unavailable" % model)
    assert re.search(reason, rows[0]["reason"]), rows[0]
    assert c.get("/v2/models/%s/ready" % model).status != 200
    c.close()
