#pragma once

// Status -> Python exception: every failure of a blockmgr call is raised as a subclass of
// blockmgr.Error named for what the caller should do about it.

#include <pybind11/pybind11.h>

#include "blockmgr/status.h"

namespace bm::python {

// Creates blockmgr.Error and its subclasses in `module`. Called once, at import.
void RegisterExceptions(pybind11::module_& module);

// Raises the exception for `status` (no-op when it is OK). The message is the one bmctl prints
// after "bmctl: " ("not found: block rdd_1_2 is not stored on any live worker").
void ThrowIfError(const Status& status);

}  // namespace bm::python
