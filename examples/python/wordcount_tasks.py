"""The word count's partition functions. They live in a module of their own so Dask's worker
processes import them by name (this directory must be on their PYTHONPATH)."""

import collections
import os
import re
import time

WORD = re.compile(r"[a-z']+")

VOCABULARY = ("block manager cache partition worker master lease replica disk memory spill "
              "evict compute shuffle stage task driver executor lineage storage level").split()


def make_lines(split, lines_per_split):
    """Split `split` of a made-up corpus: deterministic, so every run reads the same text."""
    out = []
    for n in range(lines_per_split):
        i = split * lines_per_split + n
        out.append(" ".join(VOCABULARY[(i * 7 + k * k * 13) % len(VOCABULARY)] for k in range(12)))
    return out


def count_words(lines, log_dir):
    """A partition's word counts. Each call leaves a file in `log_dir`, so the driver can tell
    how many partitions were computed rather than read from the cache."""
    counts = collections.Counter()
    for line in lines:
        counts.update(WORD.findall(line.lower()))
    marker = os.path.join(log_dir, "computed-%d-%d-%d" % (os.getpid(), time.monotonic_ns(), len(lines)))
    open(marker, "w").close()
    return [dict(counts)]


def slow_total(partition_counts, delay):
    """Sums a partition's counts, slowly enough (`delay` seconds) that a worker can be killed
    while the job runs."""
    time.sleep(delay)
    total = collections.Counter()
    for counts in partition_counts:
        total.update(counts)
    return [dict(total)]


def merge(a, b):
    total = collections.Counter(a)
    total.update(b)
    return dict(total)
