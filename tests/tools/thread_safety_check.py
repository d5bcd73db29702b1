#!/usr/bin/env python3
"""Clang's thread-safety analysis over blockmgr's product sources.

Reads the build's compile_commands.json (CMAKE_EXPORT_COMPILE_COMMANDS), and compiles each
source of common/ master/ worker/ client/ python/src/ once more with clang++ -fsyntax-only
-Wthread-safety -Werror=thread-safety (no code is generated, so this costs a fraction of a
build). State guarded by a bm::Mutex (common/core/mutex.h) is then checked: every read or write of a
BM_GUARDED_BY member with its mutex held, every BM_REQUIRES function called with it held.

A source is checked again only when it, a header it includes or its command changed since its
last clean pass: each clean pass leaves a stamp (the command's hash) and clang's list of the
headers read (-MD) under BUILD_DIR/thread_safety/, so a run after a small change checks what
the change touched, as make would.

Usage: thread_safety_check.py BUILD_DIR [JOBS]. JOBS defaults to the machine's cores. Exits 0
when clean, 1 on a finding, and 77 (ctest's SKIP_RETURN_CODE) when clang++ is not installed.
"""
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

PRODUCT_DIRS = ("common/", "master/", "worker/", "client/", "python/src/")
# GCC options clang does not know; dropped rather than letting clang warn about each.
GCC_ONLY = ("-fno-sanitize-recover", "-fconcepts-diagnostics-depth")


def read_depfile(path):
    """The files a make-style depfile names (after the target's colon); None when unreadable."""
    try:
        with open(path) as f:
            text = f.read().replace("\\\n", " ")
    except OSError:
        return None
    _, _, deps = text.partition(":")
    return deps.split()


def up_to_date(stamp, depfile, command_hash):
    """True when the stamp holds this command's hash and is newer than every file read."""
    try:
        with open(stamp) as f:
            if f.read() != command_hash:
                return False
        stamped = os.stat(stamp).st_mtime
        deps = read_depfile(depfile)
        if not deps:
            return False
        return all(os.stat(dep).st_mtime < stamped for dep in deps)
    except OSError:  # a stamp, the depfile or a header is gone
        return False


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
        command = [clang, "-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety",
                   "-Wno-unknown-warning-option"] + kept
        state = os.path.join(build, "thread_safety", path)
        command_hash = hashlib.sha256("\0".join(command).encode()).hexdigest()
        if up_to_date(state + ".ok", state + ".d", command_hash):
            continue
        commands.append((path, entry["directory"], command + ["-MD", "-MF", state + ".d"],
                         state, command_hash))

    def run(item):
        path, directory, command, state, _ = item
        os.makedirs(os.path.dirname(state), exist_ok=True)
        if os.path.exists(state + ".ok"):
            os.remove(state + ".ok")
        started = time.time()
        result = subprocess.run(command, cwd=directory, capture_output=True, text=True)
        return path, result, started

    failures = 0
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for item, (path, result, started) in zip(commands, pool.map(run, commands)):
            findings = [line for line in result.stderr.splitlines() if "-Wthread-safety" in line]
            if result.returncode != 0:
                failures += 1
                print(f"--- {path}")
                print(result.stderr if not findings else "\n".join(findings))
            else:
                _, _, _, state, command_hash = item
                with open(state + ".ok", "w") as f:
                    f.write(command_hash)
                # Dated when clang began reading: a header edited while it ran is newer.
                os.utime(state + ".ok", (started, started))
    print(f"thread_safety_check: {len(commands)} of {len(seen)} sources checked (the rest "
          f"unchanged since their last clean pass), {failures} with findings")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
