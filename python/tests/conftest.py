"""Fixtures: a real blockmgr cluster (bm-master + bm-workers on free loopback ports) from the
build's bin directory ($BM_BIN_DIR, set by ctest)."""

import os

import pytest

import blockmgr
from blockmgr.local import LocalCluster


@pytest.fixture(scope="session")
def bin_dir():
    directory = os.environ.get("BM_BIN_DIR")
    if not directory or not os.access(os.path.join(directory, "bm-master"), os.X_OK):
        pytest.skip("BM_BIN_DIR does not name a directory with bm-master and bm-worker "
                    "(run these tests through ctest)")
    return directory


@pytest.fixture(scope="module")
def cluster(bin_dir):
    # Memory budgets, not allocations: a worker only uses what is stored on it.
    with LocalCluster(workers=2, memory="640MiB", bin_dir=bin_dir) as c:
        yield c


@pytest.fixture
def client(cluster):
    with blockmgr.Client(cluster.master) as c:
        yield c
