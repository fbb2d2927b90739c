#!/usr/bin/env python3
"""Clang's thread-safety analysis over the files a clang build leaves out, without building them.

CI's clang build (build-asan, scripts/test.sh) compiles with -Wthread-safety
-Werror=thread-safety (cmake/thread_safety.cmake), but not the benchmarks or the pytorch backend
(and, on a machine without CUDA, no CUDA-only file). The ordinary build compiles those, so this
takes each C/C++ file of the ordinary build's compile_commands.json that the clang build's lacks,
and runs the clang build's compiler on it with -fsyntax-only and the analysis: the same checks,
no object file, no link. nvcc's .cu files are left out (no clang front end for them here).

Usage: scripts/thread_safety_check.py ORDINARY_BUILD_DIR CLANG_BUILD_DIR
Exit status 1 when any file fails, with clang's messages; 0 otherwise, saying what it checked.
"""
import json
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

SOURCES = (".cc", ".cpp", ".cxx", ".c")
ANALYSIS = ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety"]


def load(build_dir):
    path = os.path.join(build_dir, "compile_commands.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def source_dir(build_dir):
    """The tree a build compiles (so two builds of different checkouts compare file by file)."""
    with open(os.path.join(build_dir, "CMakeCache.txt"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("CMAKE_HOME_DIRECTORY:"):
                return os.path.realpath(line.split("=", 1)[1].strip())
    return os.path.realpath(os.path.join(build_dir, ".."))


def argv_of(entry):
    return entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])


def clang_of(entries):
    """The C and C++ compilers of the clang build, from its own compile commands."""
    cxx = cc = None
    for e in entries:
        compiler = argv_of(e)[0]
        if e["file"].endswith(".c"):
            cc = cc or compiler
        elif e["file"].endswith(SOURCES):
            cxx = cxx or compiler
    return cc or cxx, cxx


def syntax_only(argv, compiler):
    out = [compiler]
    skip = False
    for arg in argv[1:]:
        if skip:
            skip = False
            continue
        if arg in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if arg in ("-c", "-MD", "-MMD"):
            continue
        out.append(arg)
    return out + ANALYSIS


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    ordinary, clang_build = load(sys.argv[1]), load(sys.argv[2])
    clang_root = source_dir(sys.argv[2])
    ordinary_root = source_dir(sys.argv[1])
    ordinary_build = os.path.realpath(sys.argv[1])
    covered = {os.path.relpath(os.path.realpath(e["file"]), clang_root) for e in clang_build}
    cc, cxx = clang_of(clang_build)
    if cxx is None or "clang" not in os.path.basename(cxx):
        print(f"thread_safety_check: {sys.argv[2]} is not a clang build", file=sys.stderr)
        return 2

    jobs, seen = [], set()
    for e in ordinary:
        path = os.path.realpath(e["file"])
        argv = argv_of(e)
        generated = path.startswith(ordinary_build + os.sep)  # the clang build has its own
        if (generated or os.path.relpath(path, ordinary_root) in covered or path in seen
                or not path.endswith(SOURCES) or "nvcc" in os.path.basename(argv[0])):
            continue
        seen.add(path)
        compiler = cc if path.endswith(".c") else cxx
        jobs.append((path, e["directory"], syntax_only(argv, compiler)))

    def run(job):
        path, directory, argv = job
        r = subprocess.run(argv, cwd=directory, capture_output=True, text=True)
        return path, r.returncode, r.stdout + r.stderr

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = list(pool.map(run, jobs))
    failed = [(p, out) for p, rc, out in results if rc != 0]
    for path, out in failed:
        print(f"thread_safety_check: {os.path.relpath(path, ordinary_root)} failed:\n{out}",
              file=sys.stderr)
    folders = sorted({os.path.relpath(os.path.dirname(p), ordinary_root) for p, _, _ in jobs})
    for path, _, _ in jobs:
        print(f"  checked {os.path.relpath(path, ordinary_root)}")
    print(f"thread_safety_check: {len(jobs)} file(s) the clang build leaves out, "
          f"{len(failed)} failed, {time.monotonic() - start:.1f} s "
          f"({', '.join(folders) or 'none'})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
