#include "buffers.h"

#include <cstring>
#include <string>

namespace bm::python {
namespace py = pybind11;

namespace {

// A Python object's buffer export, released (under the GIL) when the chunk goes away.
class PyBufferChunk final : public Chunk {
 public:
  // Takes over `view`, which the caller obtained with PyObject_GetBuffer.
  explicit PyBufferChunk(const Py_buffer& view) : view_(view) {}
  ~PyBufferChunk() override {
    // An interpreter that already finalised has freed the object; nothing to release then.
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    PyBuffer_Release(&view_);
  }
  std::span<const std::byte> bytes() const override {
    return {static_cast<const std::byte*>(view_.buf), static_cast<size_t>(view_.len)};
  }

 private:
  Py_buffer view_;
};

[[noreturn]] void NotABuffer(const py::handle& data, const char* what) {
  throw py::type_error(std::string(what) +
                       " must be a bytes-like object (bytes, bytearray, "
                       "memoryview, a NumPy array), not '" +
                       std::string(py::str(py::type::handle_of(data).attr("__name__"))) + "'");
}

// The C-contiguous bytes of a Python object, held (its buffer export, or a copy when its buffer
// is not contiguous) until this goes away. Needs the GIL throughout.
class HeldBytes {
 public:
  HeldBytes(const py::handle& data, const char* what) {
    if (PyObject_GetBuffer(data.ptr(), &view_, PyBUF_C_CONTIGUOUS) == 0) {
      held_ = true;
      bytes_ = {static_cast<const std::byte*>(view_.buf), static_cast<size_t>(view_.len)};
      return;
    }
    PyErr_Clear();
    Py_buffer strided;
    if (PyObject_GetBuffer(data.ptr(), &strided, PyBUF_FULL_RO) != 0) {
      PyErr_Clear();
      NotABuffer(data, what);
    }
    copy_.resize(static_cast<size_t>(strided.len));
    const int copied = PyBuffer_ToContiguous(copy_.data(), &strided, strided.len, 'C');
    PyBuffer_Release(&strided);
    if (copied != 0) throw py::error_already_set();
    bytes_ = copy_;
  }
  ~HeldBytes() {
    if (held_) PyBuffer_Release(&view_);
  }
  HeldBytes(const HeldBytes&) = delete;
  HeldBytes& operator=(const HeldBytes&) = delete;

  std::span<const std::byte> bytes() const { return bytes_; }

 private:
  Py_buffer view_{};
  bool held_ = false;
  std::vector<std::byte> copy_;
  std::span<const std::byte> bytes_;
};

}  // namespace

void RegisterBlockBuffer(py::module_& module) {
  py::class_<BlockBuffer>(module, "Buffer", py::buffer_protocol(), R"doc(
A block's bytes, received by a get: a read-only buffer.

``memoryview(buf)``, ``numpy.frombuffer(buf, dtype)`` and ``pickle.loads`` read the bytes in
place, without a copy; they keep the Buffer alive. ``bytes(buf)`` makes a copy.
)doc")
      .def_buffer([](BlockBuffer& buffer) {
        // A zero-length block still needs a valid pointer for the buffer protocol.
        static std::byte empty{};
        void* data = buffer.size() == 0 ? &empty : const_cast<std::byte*>(buffer.bytes().data());
        return py::buffer_info(data, 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(buffer.size())}, {py::ssize_t{1}},
                               /*readonly=*/true);
      })
      .def("__len__", &BlockBuffer::size)
      .def_property_readonly("nbytes", &BlockBuffer::size, "The block's size in bytes.")
      .def(
          "__bytes__",
          [](const BlockBuffer& buffer) {
            return py::bytes(reinterpret_cast<const char*>(buffer.bytes().data()), buffer.size());
          },
          "A copy of the bytes.")
      .def("__eq__",
           [](const BlockBuffer& buffer, const py::object& other) -> py::object {
             Py_buffer view;
             if (PyObject_GetBuffer(other.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
               PyErr_Clear();
               return py::reinterpret_borrow<py::object>(Py_NotImplemented);
             }
             const bool same = static_cast<size_t>(view.len) == buffer.size() &&
                               (buffer.size() == 0 ||
                                std::memcmp(view.buf, buffer.bytes().data(), buffer.size()) == 0);
             PyBuffer_Release(&view);
             return py::bool_(same);
           })
      .def("__repr__", [](const BlockBuffer& buffer) {
        return "<blockmgr.Buffer of " + std::to_string(buffer.size()) + " bytes>";
      });
}

py::object MakeBlockBuffer(std::vector<std::byte> bytes) {
  return py::cast(std::make_unique<BlockBuffer>(std::move(bytes)));
}

py::object MakeBlockBuffer(ChunkPtr mapped) {
  return py::cast(std::make_unique<BlockBuffer>(std::move(mapped)));
}

py::object MakeBlockBuffer(std::unique_ptr<ByteRegion> region, std::shared_ptr<RegionPool> pool) {
  // Below this a block is not worth holding a mapping (at least a page, often a pooled
  // region of megabytes) for as long as Python keeps it.
  constexpr size_t kSmallBlock = 64 << 10;
  if (region->size() < kSmallBlock) {
    std::span<const std::byte> bytes = region->bytes();
    std::vector<std::byte> copy(bytes.begin(), bytes.end());
    pool->Give(std::move(region));
    return MakeBlockBuffer(std::move(copy));
  }
  return py::cast(std::make_unique<BlockBuffer>(std::move(region), std::move(pool)));
}

BlockData BorrowBytes(const py::handle& data) {
  BlockData block;
  Py_buffer view;
  if (PyObject_GetBuffer(data.ptr(), &view, PyBUF_C_CONTIGUOUS) == 0) {
    if (view.len > 0)
      block.Append(std::make_shared<PyBufferChunk>(view));
    else
      PyBuffer_Release(&view);
    return block;
  }
  PyErr_Clear();
  HeldBytes strided(data, "data");
  if (!strided.bytes().empty()) block.Append(MakeChunk(strided.bytes()));
  return block;
}

std::vector<std::byte> GatherBytes(const py::handle& result) {
  const char* what = "the compute function's result";
  std::vector<py::handle> parts;
  if (py::isinstance<py::list>(result) || py::isinstance<py::tuple>(result)) {
    for (py::handle part : result) parts.push_back(part);
  } else {
    parts.push_back(result);
  }
  std::vector<std::unique_ptr<HeldBytes>> held;
  size_t total = 0;
  for (const py::handle& part : parts) {
    held.push_back(std::make_unique<HeldBytes>(part, what));
    total += held.back()->bytes().size();
  }
  std::vector<std::byte> out;
  out.reserve(total);
  for (const auto& bytes : held)
    out.insert(out.end(), bytes->bytes().begin(), bytes->bytes().end());
  return out;
}

}  // namespace bm::python
