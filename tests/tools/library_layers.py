#!/usr/bin/env python3
"""Fails when a library reaches into a library above it.

Each product folder is one library (docs/ARCHITECTURE.md, "Libraries"), and a library may use
only the libraries below it: the worker never the client, the transfer code never the worker,
the public headers nothing but each other. Two things are read, so neither can drift:
  - every `#include "folder/..."` of each library's sources, against the folders it may include;
  - every `bm::name` its CMakeLists.txt links, against the libraries it may link.

Usage: library_layers.py SOURCE_DIR. Exits 0 when every library keeps to its layer, 1 otherwise.
"""
import os
import re
import sys

# Library folder -> the folders its sources may include (its own is always allowed). Folders
# are matched longest first, so worker/disk is not worker.
CORE = ("include/blockmgr", "common/core", "schema")
COMMON = CORE + ("schema", "common/security", "common/net")
MAY_INCLUDE = {
    "include/blockmgr": ("include/blockmgr",),
    "common/core": CORE,
    "common/security": CORE + ("schema",),
    "common/net": CORE + ("schema", "common/security"),
    "common/zookeeper": CORE,
    "common/http": CORE,
    "common/server": CORE + ("common/security", "common/http"),
    "transfer": COMMON,
    # The disk tier implements the interface every store of the worker has.
    "worker/disk": CORE + ("worker/block_store.h", "worker/block_status.h"),
    "worker": COMMON + ("common/http", "common/server", "common/zookeeper", "transfer",
                        "worker/disk"),
    "master": COMMON + ("common/http", "common/server", "common/zookeeper"),
    "client": COMMON + ("common/zookeeper", "transfer"),
    "bmctl": COMMON + ("common/zookeeper", "transfer", "client"),
}

# Library folder -> the bm:: libraries its CMakeLists.txt may link.
MAY_LINK = {
    "common/core": {"schema"},
    "common/security": {"core", "schema"},
    "common/net": {"core", "security", "schema"},
    "common/zookeeper": {"core", "schema"},
    "common/http": {"core", "schema"},
    "common/server": {"core", "security", "http"},
    "transfer": {"core", "security", "net", "schema"},
    "worker/disk": {"core", "schema"},
    "worker": {"core", "security", "net", "schema", "http", "server", "zookeeper", "transfer",
               "disk", "worker"},
    "master": {"core", "security", "net", "schema", "http", "server", "zookeeper", "master",
               "master_http"},
    "client": {"core", "security", "net", "schema", "zookeeper", "transfer", "client"},
    "bmctl": {"core", "security", "net", "schema", "zookeeper", "transfer", "client", "bmctl"},
}

INCLUDE = re.compile(r'^#include "([^"]+)"', re.MULTILINE)
LINKED = re.compile(r"\bbm::([a-z_]+)")


def library_of(path):
    """The library folder a source path belongs to (longest match), or None."""
    best = None
    for folder in MAY_INCLUDE:
        if path == folder or path.startswith(folder + "/"):
            if best is None or len(folder) > len(best):
                best = folder
    return best


def allowed(included, own, permitted):
    # Headers of the public API are included as "blockmgr/NAME.h" (include/ is on the path).
    if included.startswith("blockmgr/"):
        included = "include/" + included
    if library_of(included) == own:
        return True
    return any(included == p or included.startswith(p + "/") for p in permitted)


def main():
    root = os.path.abspath(sys.argv[1])
    problems = []
    files = 0
    for library, permitted in MAY_INCLUDE.items():
        for folder, _, names in os.walk(os.path.join(root, library)):
            for name in sorted(names):
                path = os.path.relpath(os.path.join(folder, name), root)
                if not name.endswith((".h", ".cc")) or library_of(path) != library:
                    continue
                files += 1
                with open(os.path.join(root, path), encoding="utf-8") as f:
                    text = f.read()
                for included in INCLUDE.findall(text):
                    if not allowed(included, library, permitted):
                        problems.append(f"{path} includes {included}: {library} may include only "
                                        f"{', '.join(permitted)}")
    for library, permitted in MAY_LINK.items():
        cmake = os.path.join(root, library, "CMakeLists.txt")
        if not os.path.exists(cmake):
            problems.append(f"{library}/CMakeLists.txt is missing: each library folder has one")
            continue
        with open(cmake, encoding="utf-8") as f:
            # Comments may name any library; only the commands count.
            text = "\n".join(line.split("#", 1)[0] for line in f)
        for linked in sorted(set(LINKED.findall(text))):
            if linked not in permitted and linked != os.path.basename(library):
                problems.append(f"{library}/CMakeLists.txt links bm::{linked}: {library} may link "
                                f"only {', '.join(sorted(permitted)) or 'no bm library'}")
    for problem in problems:
        print(problem)
    print(f"library_layers: {files} files in {len(MAY_INCLUDE)} libraries, {len(problems)} "
          f"reaching above their layer")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
