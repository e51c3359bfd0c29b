// evpool's Python bindings: what a function that takes a stream accepts.
//
// Design rationale
// ----------------
// Python's GPU libraries each have a stream class of their own (cupy.cuda.Stream,
// torch.cuda.Stream, cuda.core's Stream), and CUDA Python names the protocol that lets any of them
// pass for another: an object whose __cuda_stream__() returns (version, handle), version 0, the
// handle an int (cuda.core, "Interoperability"). evpool takes a stream by that protocol, never by
// class, and also a plain int, the handle itself (what torch.cuda.Stream.cuda_stream and
// cupy.cuda.Stream.ptr give). Its own leases implement the protocol, and are read here without
// the call (the hot path: `await evpool.done(lease)`).
//
// What is refused, with a Python exception naming the value: an object with neither (TypeError),
// a protocol answer that is not (0, int) (TypeError), a negative int or one wider than a pointer
// (ValueError). Whether the number names a live stream is the backend's to check where it can
// (the test module's registry does; CUDA cannot tell a stale handle, as for any CUDA library).
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <string>

namespace evpool::python {

namespace nb = nanobind;

/// The handle `value` names, from an int. Throws nb::value_error for one that no pointer holds.
inline std::uintptr_t handle_from_int(nb::handle value) {
  const unsigned long long handle = PyLong_AsUnsignedLongLong(value.ptr());
  if (handle == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    throw nb::value_error(
        ("evpool: a stream handle must be an int in [0, 2**64); got " + std::string(nb::repr(value).c_str())).c_str());
  }
  return static_cast<std::uintptr_t>(handle);
}

/// The stream handle `stream` names: an object of `Lease` (read directly), any object with
/// __cuda_stream__, or an int. Requires the GIL (or, free-threaded, an attached thread).
/// Throws nb::type_error or nb::value_error (see the top), and what the lease's handle() throws
/// (an ended lease).
template <class Lease>
std::uintptr_t stream_address(nb::handle stream) {
  if (Lease *lease = nullptr; nb::try_cast<Lease *>(stream, lease, /*convert=*/false) && lease != nullptr)
    return lease->handle();
  if (PyLong_Check(stream.ptr()) && !PyBool_Check(stream.ptr())) return handle_from_int(stream);
  if (!nb::hasattr(stream, "__cuda_stream__"))
    throw nb::type_error(("evpool: expected a stream: an object with __cuda_stream__() (an evpool lease, or a "
                          "CuPy, PyTorch or cuda.core stream) or an int handle; got an object of type " +
                          std::string(nb::type_name(stream.type()).c_str()))
                             .c_str());
  nb::object answer = stream.attr("__cuda_stream__")();
  nb::tuple pair;
  if (!nb::try_cast<nb::tuple>(answer, pair) || pair.size() != 2 || !PyLong_Check(pair[0].ptr()) ||
      nb::cast<long long>(pair[0]) != 0 || !PyLong_Check(pair[1].ptr()))
    throw nb::type_error(("evpool: __cuda_stream__() of an object of type " +
                          std::string(nb::type_name(stream.type()).c_str()) + " returned " +
                          std::string(nb::repr(answer).c_str()) +
                          "; the protocol's version 0 answers (0, handle), the handle an int")
                             .c_str());
  return handle_from_int(pair[1]);
}

}  // namespace evpool::python
