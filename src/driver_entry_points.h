// evpool: the CUDA driver's entry points the library calls, resolved once through the runtime.
// Private.
//
// Through cudaGetDriverEntryPointByVersion, so that the library links no libcuda: the runtime
// loads the driver anyway. Each is resolved by name and ABI version (cudaTypedefs.h names each
// version's signature); a null one is absent from this driver, and its caller falls back to the
// runtime. Driver calls skip the runtime's own work per call: cuStreamQuery took 161 ns on the
// H200 host against 220 for cudaStreamQuery, 155 against 479 on a busy stream.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

namespace evpool::detail {

// The driver's entry points, resolved once by name and ABI version (cudaTypedefs.h names each
// version's signature); a null one is absent from this driver.
struct DriverEntryPoints {
  PFN_cuStreamGetCaptureInfo_v11030 get_capture_info = nullptr;
  PFN_cuStreamGetDevice_v12080 get_device = nullptr;
  PFN_cuStreamGetCtx_v9020 get_context = nullptr;
  PFN_cuStreamGetId_v12000 get_id = nullptr;
  PFN_cuCtxPushCurrent_v4000 push_context = nullptr;
  PFN_cuCtxGetDevice_v2000 current_context_device = nullptr;
  PFN_cuCtxPopCurrent_v4000 pop_context = nullptr;
  PFN_cuStreamQuery_v2000 query = nullptr;
  PFN_cuEventQuery_v2000 query_event = nullptr;
  PFN_cuThreadExchangeStreamCaptureMode_v10010 exchange_capture_mode = nullptr;
  // Completion signals (cuda_completion_backend.cc): the write, and what tells whether a device
  // can make it.
  PFN_cuStreamWriteValue64_v11070 write_value64 = nullptr;
  PFN_cuDeviceGet_v2000 get_device_handle = nullptr;
  PFN_cuDeviceGetAttribute_v2000 get_device_attribute = nullptr;

  DriverEntryPoints() {
    resolve("cuStreamGetCaptureInfo", 11030, get_capture_info);
    resolve("cuStreamGetDevice", 12080, get_device);
    resolve("cuStreamGetCtx", 9020, get_context);
    resolve("cuStreamGetId", 12000, get_id);
    resolve("cuCtxPushCurrent", 4000, push_context);
    resolve("cuCtxGetDevice", 2000, current_context_device);
    resolve("cuCtxPopCurrent", 4000, pop_context);
    resolve("cuStreamQuery", 2000, query);
    resolve("cuEventQuery", 2000, query_event);
    resolve("cuThreadExchangeStreamCaptureMode", 10010, exchange_capture_mode);
    resolve("cuStreamWriteValue64", 11070, write_value64);
    resolve("cuDeviceGet", 2000, get_device_handle);
    resolve("cuDeviceGetAttribute", 2000, get_device_attribute);
  }

  bool know_contexts() const noexcept {
    return get_context != nullptr && push_context != nullptr && current_context_device != nullptr &&
           pop_context != nullptr;
  }

  template <class Function>
  static void resolve(const char *symbol, unsigned version, Function &function) {
    void *address = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion(symbol, &address, version, cudaEnableDefault, &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      function = reinterpret_cast<Function>(address);
  }
};

/// The entry points, resolved on first use (thread-safe, once).
inline const DriverEntryPoints &driver() {
  static const DriverEntryPoints resolved;
  return resolved;
}

// Runs `call` with the calling thread's capture mode relaxed, then puts the mode back: a query
// (of a stream or an event) made while another thread captures in global mode is an unsafe call
// that invalidates that capture (cudaErrorStreamCaptureInvalidated at its end, measured on the
// H200 host), and in relaxed mode it is not. 13 ns a call there.
template <class Call>
auto with_relaxed_capture(const DriverEntryPoints &calls, Call call) {
  if (calls.exchange_capture_mode == nullptr) return call();
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  (void)calls.exchange_capture_mode(&mode);
  const auto result = call();
  (void)calls.exchange_capture_mode(&mode);
  return result;
}

}  // namespace evpool::detail
