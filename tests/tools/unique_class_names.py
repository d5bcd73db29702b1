#!/usr/bin/env python3
"""Fails when two classes (or structs) of the product share a name.

Every product library puts its types in namespace bm, so two classes named alike in two
libraries are one name defined twice: linked into one binary (bm-bench links the client and the
worker), that breaks the one-definition rule without a word from the linker. Reads the
namespace-level definitions (a `class Name {` or `struct Name : ...` at the start of a line) of
every header and source under the product folders.

Usage: unique_class_names.py SOURCE_DIR. Exits 0 when every name is defined once, 1 otherwise.
"""
import os
import re
import sys
from collections import defaultdict

PRODUCT_DIRS = ("common", "master", "worker", "client", "transfer", "bmctl", "include", "python/src")
DEFINITION = re.compile(r"^(?:class|struct) ([A-Z][A-Za-z0-9_]*)(?: final)? *(?:\{|: )")


def main():
    root = os.path.abspath(sys.argv[1])
    where = defaultdict(list)
    files = 0
    for product_dir in PRODUCT_DIRS:
        for folder, _, names in os.walk(os.path.join(root, product_dir)):
            for name in sorted(names):
                if not name.endswith((".h", ".cc")):
                    continue
                path = os.path.join(folder, name)
                files += 1
                with open(path, encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        found = DEFINITION.match(line)
                        if found:
                            where[found.group(1)].append(f"{os.path.relpath(path, root)}:{number}")
    twice = {name: places for name, places in where.items() if len(places) > 1}
    for name, places in sorted(twice.items()):
        print(f"{name} is defined {len(places)} times: {', '.join(places)}")
    print(f"unique_class_names: {len(where)} names in {files} files, {len(twice)} defined twice")
    return 1 if twice else 0


if __name__ == "__main__":
    sys.exit(main())
