// evpool._evpool: the Python API over CUDA (bind_api.h), the module users run.
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>

#include <cstdint>
#include <memory>
#include <string>

#include "bind_api.h"
#include "evpool/completion_queue.h"
#include "evpool/cuda_error.h"
#include "evpool/cuda_event_pool.h"
#include "evpool/cuda_stream_pool.h"
#include "evpool/stream_wait.h"

namespace evpool::python {
namespace {

struct CudaTraits {
  using stream_pool = CUDAStreamPool;
  using stream_lease = CUDAStreamLease;
  using event_pool = CUDAEventPool;
  using event_lease = CUDAEventPool::unique_lease;
  using completion_backend = CUDACompletionBackend;
  using inbox_before_wake = WakeAtOnce;
  static constexpr unsigned kCompletionEventFlags = cudaEventDisableTiming;

  static std::unique_ptr<stream_pool> make_stream_pool(unsigned flags, int priority, std::size_t max_idle,
                                                       bool reuse_at_once, std::size_t cap) {
    return std::make_unique<stream_pool>(flags, priority, max_idle, Checks::kDefault,
                                         reuse_at_once ? StreamReuse::kAtOnce : StreamReuse::kWhenIdle, cap);
  }
  static stream_pool &stream_pool_instance(unsigned flags, int priority) {
    return CUDAStreamPool::instance_for(flags, priority);
  }
  static std::unique_ptr<event_pool> make_event_pool(unsigned flags, std::size_t max_idle) {
    return std::make_unique<event_pool>(flags, max_idle);
  }
  static event_pool &event_pool_instance(unsigned flags) { return CUDAEventPool::instance_for(flags); }

  static stream_lease lease_stream(stream_pool &pool, int device) { return pool.Get(device); }
  static event_lease lease_event(event_pool &pool, int device) { return pool.Lease(device); }
  static void end_synchronized(stream_lease &lease) { lease.synchronize_and_reset(); }

  static cudaStream_t stream(std::uintptr_t address) noexcept {
    return reinterpret_cast<cudaStream_t>(address);
  }
  static cudaStream_t completion_stream(std::uintptr_t address) noexcept { return stream(address); }

  static void record(event_lease &event, std::uintptr_t stream_address) {
    if (const cudaError_t error = cudaEventRecord(event.get(), stream(stream_address)); error != cudaSuccess)
      throw CUDAError(error, "cudaEventRecord");
  }
  static bool query(event_lease &event) {
    const cudaError_t status = cudaEventQuery(event.get());
    if (status == cudaErrorNotReady) return false;
    if (status != cudaSuccess) throw CUDAError(status, "cudaEventQuery");
    return true;
  }
  static void synchronize(event_lease &event) {
    if (const cudaError_t error = cudaEventSynchronize(event.get()); error != cudaSuccess)
      throw CUDAError(error, "cudaEventSynchronize");
  }
  static void wait(std::uintptr_t consumer, std::uintptr_t producer, event_pool &pool) {
    evpool::wait(stream(consumer), stream(producer), pool);
  }
  static completion_backend completion_backend_for(event_pool &pool) { return completion_backend(pool); }
  static std::string error_name(cudaError_t status) { return cudaGetErrorName(status); }
};

// evpool.CUDAError (evpool/_errors.py), carrying CUDA's status and its name, for the library's.
void register_cuda_error_translator() {
  nb::register_exception_translator([](const std::exception_ptr &error, void *) {
    try {
      std::rethrow_exception(error);
    } catch (const CUDAError &e) {
      nb::gil_scoped_acquire gil;  // translators run with it held; explicit for clarity under free threading
      nb::object type = nb::module_::import_("evpool._errors").attr("CUDAError");
      nb::object instance = type(static_cast<int>(e.error()), cudaGetErrorName(e.error()), nb::str(e.what()));
      PyErr_SetObject(type.ptr(), instance.ptr());
    }
  });
}

}  // namespace
}  // namespace evpool::python

NB_MODULE(_evpool, m) {
  using namespace evpool::python;
  m.doc() = "evpool's bindings over CUDA; use the package evpool, not this module.";
  register_exception_translators();
  register_cuda_error_translator();  // after: tried first
  bind_api<CudaTraits>(m);
  m.def(
      "device_count",
      [] {
        int count = 0;
        if (const cudaError_t error = cudaGetDeviceCount(&count); error != cudaSuccess) {
          (void)cudaGetLastError();
          return 0;
        }
        return count;
      },
      "CUDA's visible devices; 0 where CUDA has no driver or no device.");
  m.attr("NON_BLOCKING") = static_cast<unsigned>(cudaStreamNonBlocking);
  m.attr("DISABLE_TIMING") = static_cast<unsigned>(cudaEventDisableTiming);
  m.attr("BLOCKING_SYNC") = static_cast<unsigned>(cudaEventBlockingSync);
  m.attr("FREE_THREADED") =
#if defined(NB_FREE_THREADED)
      true;
#else
      false;
#endif
}
