#!/usr/bin/env python3
"""Folder-to-folder #include edges under src/, and a failure when they form a cycle.

An edge A -> B means a file directly in folder A includes a header that lives directly in folder
B (quoted includes only, resolved the way the build resolves them: the including file's folder,
then src/, then include/). Folders are compared as they are, not merged with their parents, so
src/server/http and src/server/metrics are two folders, and src/backends and src/backends/abi
too. Every strongly connected group of two or more folders is printed with the includes that
close it; the exit status is 1 when there is one.

Usage: scripts/include_cycles.py [--edges]   (--edges also prints every edge with its count)
"""
import os
import re
import sys
from collections import defaultdict

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SEARCH = [os.path.join(ROOT, "src"), os.path.join(ROOT, "include")]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCES = (".h", ".cc", ".cpp", ".cu", ".cuh")


def resolve(including_file, name):
    for base in [os.path.dirname(including_file)] + SEARCH:
        candidate = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(candidate):
            return candidate
    return None  # generated (model_config.pb.h) or from outside the tree


def folder(path):
    return os.path.relpath(os.path.dirname(path), ROOT)


def edges():
    found = defaultdict(list)  # (from folder, to folder) -> ["file: include", ...]
    for top in SEARCH:
        for dirpath, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for line in f:
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = resolve(path, m.group(1))
                        if target is None or folder(target) == folder(path):
                            continue
                        found[(folder(path), folder(target))].append(
                            f"{os.path.relpath(path, ROOT)}: {m.group(1)}")
    return found


def strongly_connected(graph):
    """Tarjan's algorithm, iterative; returns the groups of two or more nodes."""
    index, low, on_stack, stack, groups = {}, {}, set(), [], []
    counter = [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def main():
    found = edges()
    graph = defaultdict(set)
    for a, b in found:
        graph[a].add(b)
        graph.setdefault(b, set())
    if "--edges" in sys.argv[1:]:
        for (a, b), sites in sorted(found.items()):
            print(f"{a} -> {b} ({len(sites)})")
    groups = strongly_connected(graph)
    for group in groups:
        print("include cycle between folders: " + ", ".join(group))
        for (a, b), sites in sorted(found.items()):
            if a in group and b in group:
                for site in sites:
                    print(f"  {a} -> {b}   {site}")
    if not groups:
        print(f"include_cycles: {len(graph)} folders, {len(found)} folder-to-folder edges, "
              "no cycle")
    return 1 if groups else 0


if __name__ == "__main__":
    sys.exit(main())
