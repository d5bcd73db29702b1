#!/usr/bin/python3
"""bm-bench's "bm_transfer" task from Python (blockmgr.Client): the same puts then gets, timed
the same way (bench/tasks.cc MeasureTransfer), printed as one JSON object. bm-bench runs it as
`python_transfer.py --path <build>/python '<task json>'` (workload 8).

A get keeps the block as the blockmgr.Buffer the client returns (what a Python caller receives);
the C++ task counts the bytes where the client library received them."""

import json
import math
import sys
import time

import numpy as np


def run_timed(seconds, min_ops, op):
    start = time.perf_counter()
    ops = 0
    while True:
        op()
        ops += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and ops >= min_ops:
            return ops, elapsed


def main():
    args = sys.argv[1:]
    if len(args) == 3 and args[0] == "--path":
        sys.path.insert(0, args[1])
        args = args[2:]
    if len(args) != 1:
        sys.exit("usage: python_transfer.py [--path DIR] TASK_JSON")
    import blockmgr

    task = json.loads(args[0])
    # As every bm-bench client process does (TuneAllocatorForBlockBuffers).
    blockmgr.tune_allocator()
    size = int(task["size"])
    ids = int(task.get("ids", 4))
    rdd = int(task.get("rdd", 1))
    level = task.get("level", "MEMORY_ONLY")
    seconds = float(task.get("seconds", 1.0))
    min_ops = int(task.get("min_ops", 3))
    client = blockmgr.Client(task["master"], timeout=task.get("timeout_ms", 30000) / 1000.0,
                             local_reads=bool(task.get("local_reads", False)))
    # "touch": read every cache line of each block got, as the C++ "chunks" gets do.
    touch = bool(task.get("touch", False))
    # The same repeatable pattern as bench/tasks.cc PatternBytes, every page touched.
    data = ((np.arange(size, dtype=np.uint64) * 131 + 7) >> 3).astype(np.uint8)

    next_key = [0]

    def put():
        client.put((rdd, next_key[0] % ids), data, level)
        next_key[0] += 1

    put_ops, put_seconds = run_timed(seconds, min_ops, put)
    stored = min(next_key[0], ids)
    stride = 7919
    while math.gcd(stride, stored) != 1:
        stride += 1
    read = [0]

    def get():
        block = client.get((rdd, (read[0] * stride) % stored))
        read[0] += 1
        if len(block) != size:
            raise RuntimeError("get returned a wrong size")
        if touch:
            np.frombuffer(block, dtype=np.uint64, count=size // 8)[::8].sum()

    get_ops, get_seconds = run_timed(seconds, min_ops, get)
    print(json.dumps({"put_bytes_per_s": put_ops / put_seconds * size,
                      "get_bytes_per_s": get_ops / get_seconds * size,
                      "put_ops": put_ops, "get_ops": get_ops, "ok": True}))


if __name__ == "__main__":
    main()
