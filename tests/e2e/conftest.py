"""End-to-end fixtures: start the real vramd binary and talk HTTP to it.

Environment:
  VRAMD_BIN          the server binary (default /work/main/build/src/cli/vramd)
  VRAMD_SOURCE_DIR   the source tree; the model repository is tests/fixtures/models under it
                     (default: two directories above this file)
  VRAMD_E2E_LOG_VERBOSE  passed as --log-verbose to every server started here (default: unset)

Every server is started with --http-port 0 on 127.0.0.1; its port is parsed from the
"HTTP listening on <addr>:<port>" line it writes to stderr. Servers log to files under pytest's
temp dir; on teardown they get SIGTERM and must exit 0 without any sign of a crash.
Run with: /usr/bin/python3 -m pytest tests/e2e
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from e2e_helpers import FIXTURE_REPO, VramdProcess, loadable_fixture_models  # noqa: E402


@pytest.fixture(scope="session")
def fixture_repo():
    if not FIXTURE_REPO.is_dir():
        pytest.fail("fixture model repository %s is missing" % FIXTURE_REPO)
    return FIXTURE_REPO


@pytest.fixture(scope="session")
def server(fixture_repo, tmp_path_factory):
    """The shared server on the fixtures repository."""
    s = VramdProcess([fixture_repo], tmp_path_factory.mktemp("vramd-main"),
                     extra_args=["--http-thread-count", "4"], name="main",
                     ready_models=loadable_fixture_models(fixture_repo))
    try:
        s.start()
    except BaseException:
        s.kill()
        raise
    yield s
    if not s.alive():
        code = s.proc.returncode
        s._close_files()
        raise AssertionError("the shared vramd died during the tests (exit %s)\n%s"
                             % (code, s.describe()))
    code = s.stop()
    s.assert_clean_exit(code)


@pytest.fixture(scope="session")
def start_server(tmp_path_factory):
    """Factory for extra servers: start_server(repos, extra_args, wait_ready=True).
    Servers still running at session end are stopped and must exit cleanly."""
    started = []

    def _start(repos, extra_args=(), wait_ready=True, name="extra", launch_only=False,
               ready_models=None):
        s = VramdProcess(repos, tmp_path_factory.mktemp(name), extra_args, name=name,
                         ready_models=ready_models)
        started.append(s)
        if launch_only:
            return s.launch()
        try:
            s.start(wait_ready=wait_ready)
        except BaseException:
            s.kill()
            raise
        return s

    yield _start
    errors = []
    for s in started:
        if s.alive():
            code = s.stop()
            try:
                s.assert_clean_exit(code)
            except AssertionError as e:
                errors.append(str(e))
    assert not errors, "\n\n".join(errors)


@pytest.fixture
def shm_object():
    """A 64 KiB POSIX shared-memory object for the shared-memory tests, unlinked after."""
    from multiprocessing import shared_memory
    obj = shared_memory.SharedMemory(name="vramd_e2e_shm_%d" % os.getpid(), create=True,
                                     size=1 << 16)
    yield obj
    obj.close()
    obj.unlink()


@pytest.fixture
def client(server):
    c = server.client()
    yield c
    c.close()
