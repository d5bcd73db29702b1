#pragma once

// blockmgr.Client: bm::Client for Python. Block ids are strings ("rdd_7_3") or (rdd, partition)
// tuples; levels are strings ("MEMORY_AND_DISK_2"). The GIL is released while a call waits on
// the network; calls from several Python threads on one Client take turns (bm::Client is not
// thread-safe), so threads that want to overlap their calls use a Client each.

#include <pybind11/pybind11.h>

namespace bm::python {

// Defines blockmgr.Client and the plain result types it returns in `module`.
void RegisterClient(pybind11::module_& module);

}  // namespace bm::python
