#include "evpool/detail/cuda_streams.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdio>

#include "evpool/cuda_error.h"

#include "cuda_runtime_helpers.h"
#include "driver_entry_points.h"
#include "scoped_current_device.h"

namespace evpool::detail {
namespace {

bool is_special_handle(cudaStream_t stream) {
  return stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
}

void check_driver(CUresult result, const char *call) {
  // The runtime's codes equal the driver's for every error these calls return.
  if (result != CUDA_SUCCESS) check_cuda(static_cast<cudaError_t>(result), call);
}

StreamCapture capture_from(cudaStreamCaptureStatus status, unsigned long long id) {
  switch (status) {
    case cudaStreamCaptureStatusActive: return {StreamCapture::kActive, id};
    case cudaStreamCaptureStatusInvalidated: return {StreamCapture::kInvalidated, id};
    default: return {StreamCapture::kNone, 0};
  }
}

}  // namespace

StreamCapture CudaStreams::capture_of(cudaStream_t stream) {
  const DriverEntryPoints &calls = driver();
  if (is_special_handle(stream) || calls.get_capture_info == nullptr) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    check_cuda(cudaStreamGetCaptureInfo(stream, &status, &id), "cudaStreamGetCaptureInfo");
    return capture_from(status, id);
  }
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  check_driver(calls.get_capture_info(reinterpret_cast<CUstream>(stream), &status, &id, nullptr, nullptr, nullptr),
               "cuStreamGetCaptureInfo");
  return capture_from(static_cast<cudaStreamCaptureStatus>(status), id);
}

int CudaStreams::device_of(cudaStream_t stream, const StreamCapture &capture) {
  int device = -1;
  if (is_special_handle(stream)) {
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    return device;
  }
  const DriverEntryPoints &calls = driver();
  const auto handle = reinterpret_cast<CUstream>(stream);
  CUdevice found = -1;
  if (capture.status == StreamCapture::kNone) {  // the fastest lookup, refused under capture
    if (calls.get_device == nullptr) {
      check_cuda(cudaStreamGetDevice(stream, &device), "cudaStreamGetDevice");
      return device;
    }
    check_driver(calls.get_device(handle, &found), "cuStreamGetDevice");
    return found;
  }
  if (!calls.know_contexts())  // never where the runtime runs: each has been there since CUDA 4
    throw CUDAError(cudaErrorNotSupported, "cuStreamGetCtx, cuCtxPushCurrent, cuCtxGetDevice, cuCtxPopCurrent");
  // The device of the stream's context, made current for the question: context calls touch no
  // stream, and capture allows them (H200, CUDA 13, every mode).
  CUcontext context = nullptr;
  check_driver(calls.get_context(handle, &context), "cuStreamGetCtx");
  check_driver(calls.push_context(context), "cuCtxPushCurrent");
  const CUresult asked = calls.current_context_device(&found);
  CUcontext popped = nullptr;
  calls.pop_context(&popped);  // pops what it pushed: cannot fail
  check_driver(asked, "cuCtxGetDevice");
  return found;
}

void CudaStreams::record(cudaEvent_t event, cudaStream_t stream, int device, bool external) {
  ScopedCurrentDevice on(device);  // allowed under capture: it touches no stream
  check_cuda(cudaEventRecordWithFlags(event, stream, external ? cudaEventRecordExternal : cudaEventRecordDefault),
             external ? "cudaEventRecordWithFlags(cudaEventRecordExternal)" : "cudaEventRecord");
}

void CudaStreams::wait(cudaStream_t stream, cudaEvent_t event, int device, bool external) {
  ScopedCurrentDevice on(device);  // allowed under capture: it touches no stream
  check_cuda(cudaStreamWaitEvent(stream, event, external ? cudaEventWaitExternal : cudaEventWaitDefault),
             external ? "cudaStreamWaitEvent(cudaEventWaitExternal)" : "cudaStreamWaitEvent");
}

void CudaStreams::give_to_graph(cudaStream_t stream, DeferredWork &owner) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  const cudaError_t queried = cudaStreamGetCaptureInfo(stream, &status, nullptr, &graph);
  if (queried != cudaSuccess) {
    defer(owner);
    throw CUDAError(queried, "cudaStreamGetCaptureInfo");
  }
  cudaUserObject_t object = nullptr;
  const cudaError_t made =
      cudaUserObjectCreate(&object, &owner, on_graph_destroyed, 1, cudaUserObjectNoDestructorSync);
  if (made != cudaSuccess) {
    defer(owner);
    throw CUDAError(made, "cudaUserObjectCreate");
  }
  const cudaError_t moved = cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove);
  if (moved != cudaSuccess) {
    cudaUserObjectRelease(object, 1);  // the last reference: its destructor defers the owner
    throw CUDAError(moved, "cudaGraphRetainUserObject");
  }
}

std::string CudaStreams::describe(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy) return "the legacy default stream";
  if (stream == cudaStreamPerThread) return "the per-thread default stream";
  char text[40];
  std::snprintf(text, sizeof text, "stream %p", static_cast<void *>(stream));
  return text;
}

}  // namespace evpool::detail
