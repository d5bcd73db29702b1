// blockmgr._blockmgr: the compiled part of the `blockmgr` package (see blockmgr/__init__.py).

#include <pybind11/pybind11.h>

#include "buffers.h"
#include "errors.h"
#include "py_client.h"

PYBIND11_MODULE(_blockmgr, module) {
  module.doc() = "The blockmgr client, compiled (import blockmgr instead).";
  bm::python::RegisterExceptions(module);
  bm::python::RegisterBlockBuffer(module);
  bm::python::RegisterClient(module);
}
