#!/usr/bin/env python3
"""Clang's thread-safety analysis over blockmgr's product sources.

Reads the build's compile_commands.json (CMAKE_EXPORT_COMPILE_COMMANDS), and compiles each
source of common/ master/ worker/ client/ python/src/ once more with clang++ -fsyntax-only
-Wthread-safety -Werror=thread-safety (no code is generated, so this costs a fraction of a
build). State guarded by a bm::Mutex (common/mutex.h) is then checked: every read or write of a
BM_GUARDED_BY member with its mutex held, every BM_REQUIRES function called with it held.

Usage: thread_safety_check.py BUILD_DIR [JOBS]. Exits 0 when clean, 1 on a finding, and 77
(ctest's SKIP_RETURN_CODE) when clang++ is not installed.
"""
import json
import os
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

PRODUCT_DIRS = ("common/", "master/", "worker/", "client/", "python/src/")
# GCC options clang does not know; dropped rather than letting clang warn about each.
GCC_ONLY = ("-fno-sanitize-recover", "-fconcepts-diagnostics-depth")


def main():
    build = os.path.abspath(sys.argv[1])
    jobs = int(sys.argv[2]) if len(sys.argv) > 2 else os.cpu_count() or 1
    clang = shutil.which("clang++") or shutil.which("clang++-14")
    if clang is None:
        print("thread_safety_check: clang++ is not installed (deploy/install-test-deps.sh "
              "installs it)")
        return 77
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = json.load(f)
    source_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    commands = []
    seen = set()
    for entry in entries:
        path = os.path.relpath(entry["file"], source_root)
        if not path.startswith(PRODUCT_DIRS) or path in seen or not path.endswith(".cc"):
            continue
        seen.add(path)
        args = entry.get("arguments") or shlex.split(entry["command"])
        # Drop the launcher (ccache) and the compiler: everything before the first option.
        args = args[next(i for i, arg in enumerate(args) if arg.startswith("-")):]
        kept = []
        skip_next = False
        for arg in args:
            if skip_next:
                skip_next = False
                continue
            if arg in ("-o", "-MF", "-MT", "-MQ"):
                skip_next = True
                continue
            if arg in ("-c", "-MD", "-MMD") or arg.startswith(GCC_ONLY):
                continue
            kept.append(arg)
        commands.append((path, entry["directory"],
                         [clang, "-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety",
                          "-Wno-unknown-warning-option"] + kept))

    def run(item):
        path, directory, command = item
        result = subprocess.run(command, cwd=directory, capture_output=True, text=True)
        return path, result

    failures = 0
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for path, result in pool.map(run, commands):
            findings = [line for line in result.stderr.splitlines() if "-Wthread-safety" in line]
            if result.returncode != 0:
                failures += 1
                print(f"--- {path}")
                print(result.stderr if not findings else "\n".join(findings))
    print(f"thread_safety_check: {len(commands)} sources, {failures} with findings")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
