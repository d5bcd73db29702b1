"""Partition functions for the Dask tests, importable by Dask's worker processes (the tests
put this directory on PYTHONPATH). Each computed partition appends a line to a file, so a test
counts computations across every process that ran one."""

import os

import numpy as np


def record(path, what):
    # O_APPEND writes of one short line are atomic across processes.
    with open(path, "a") as f:
        f.write("%s %d\n" % (what, os.getpid()))


def squares(partition, path):
    items = list(partition)
    record(path, "bag-%d" % items[0])
    return [x * x for x in items]


def scaled_block(block, path):
    record(path, "array-%d" % int(block.flat[0]))
    return block * 2.0


def computed(path):
    try:
        with open(path) as f:
            return [line.split()[0] for line in f if line.strip()]
    except FileNotFoundError:
        return []


def bag_of_squares(path, n=40, partitions=4):
    import dask.bag as db

    return db.from_sequence(range(n), npartitions=partitions).map_partitions(squares, path)


def array_scaled(path):
    import dask.array as da

    # meta given, so Dask does not call scaled_block on a sample to infer it.
    return da.arange(4000, chunks=1000, dtype=np.float64).map_blocks(
        scaled_block, path, meta=np.array((), dtype=np.float64))
