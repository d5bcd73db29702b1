// blockmgr._blockmgr: the compiled part of the `blockmgr` package (see blockmgr/__init__.py).

#include <pybind11/pybind11.h>

#include "buffers.h"
#include "common/core/allocator.h"
#include "errors.h"
#include "py_client.h"

PYBIND11_MODULE(_blockmgr, module) {
  module.doc() = "The blockmgr client, compiled (import blockmgr instead).";
  bm::python::RegisterExceptions(module);
  bm::python::RegisterBlockBuffer(module);
  bm::python::RegisterClient(module);
  module.def("tune_allocator", &bm::TuneAllocatorForBlockBuffers, R"doc(
Tunes this process's malloc (glibc) for moving blocks, as blockmgr's own programs do: the ~1 MiB
buffers blocks are received in are then reused instead of mapped and faulted in afresh for
every frame, which makes large gets several times faster. The price: the process's RSS does
not shrink right after a burst of frees (up to 512 MiB stays with it). Call once, early.
)doc");
}
