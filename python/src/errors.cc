#include "errors.h"

#include <string_view>

namespace bm::python {
namespace py = pybind11;

namespace {

// The exception classes, created at import and kept for the life of the interpreter (the
// module holds references to them too).
struct ExceptionClasses {
  PyObject* error = nullptr;
  PyObject* not_found = nullptr;
  PyObject* unavailable = nullptr;
  PyObject* out_of_space = nullptr;
  PyObject* permission_denied = nullptr;
  PyObject* invalid_argument = nullptr;
  PyObject* aborted = nullptr;
  PyObject* too_large = nullptr;
  PyObject* unknown_worker = nullptr;
  PyObject* internal = nullptr;
  PyObject* data_loss = nullptr;
};
ExceptionClasses classes;

PyObject* NewException(py::module_& module, const char* name, PyObject* bases, const char* doc) {
  const std::string qualified = std::string("blockmgr.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (type == nullptr) throw py::error_already_set();
  module.add_object(name, py::reinterpret_borrow<py::object>(type));
  return type;
}

PyObject* Subclass(py::module_& module, const char* name, const char* doc,
                   PyObject* also = nullptr) {
  py::tuple bases = also ? py::make_tuple(py::handle(classes.error), py::handle(also))
                         : py::make_tuple(py::handle(classes.error));
  return NewException(module, name, bases.ptr(), doc);
}

// By the code's name rather than its enumerator, so codes added to blockmgr/status.h later
// (e.g. "permission denied") map without a change here.
PyObject* ClassFor(std::string_view code_name) {
  if (code_name == "not found") return classes.not_found;
  if (code_name == "unavailable") return classes.unavailable;
  if (code_name == "out of space") return classes.out_of_space;
  if (code_name == "permission denied") return classes.permission_denied;
  if (code_name == "invalid argument") return classes.invalid_argument;
  if (code_name == "aborted") return classes.aborted;
  if (code_name == "too large") return classes.too_large;
  if (code_name == "unknown worker") return classes.unknown_worker;
  if (code_name == "internal error") return classes.internal;
  if (code_name == "data loss") return classes.data_loss;
  return classes.error;
}

}  // namespace

void RegisterExceptions(py::module_& module) {
  classes.error = NewException(module, "Error", PyExc_Exception,
                               "Base class of every error a blockmgr call raises.");
  classes.not_found = Subclass(module, "NotFound",
                               "The block, worker or RDD does not exist (or no live worker holds "
                               "the block).");
  classes.unavailable = Subclass(module, "Unavailable",
                                 "The master or the workers did not answer in time: retry later.",
                                 PyExc_ConnectionError);
  classes.out_of_space = Subclass(module, "OutOfSpace", "No worker has room for the block.");
  classes.permission_denied =
      Subclass(module, "PermissionDenied", "The cluster refused the call for this client's role.",
               PyExc_PermissionError);
  classes.invalid_argument =
      Subclass(module, "InvalidArgument", "The call itself was wrong (a bad id, level or address).",
               PyExc_ValueError);
  classes.aborted =
      Subclass(module, "Aborted", "Lost a race (the block kept being replaced while read): retry.");
  classes.too_large = Subclass(module, "TooLarge", "Over a protocol or configured limit.");
  classes.unknown_worker =
      Subclass(module, "UnknownWorker", "The master does not know the worker.");
  classes.internal = Subclass(module, "InternalError", "An unexpected failure (a bug): report it.");
  classes.data_loss =
      Subclass(module, "DataLoss",
               "Stored bytes failed their checks or are gone on every copy (a shuffle partition's "
               "lost maps: the reader's missing_maps, to run again).");
}

void ThrowIfError(const Status& status) {
  if (status.ok()) return;
  PyErr_SetString(ClassFor(StatusCodeName(status.code())), status.ToString().c_str());
  throw py::error_already_set();
}

}  // namespace bm::python
