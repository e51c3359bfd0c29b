// evpool: CUDACompletionBackend (completion_queue.h).
#include "evpool/completion_queue.h"

#include <cuda.h>

#include <new>
#include <stdexcept>
#include <string>

#include "driver_entry_points.h"
#include "evpool/detail/cuda_streams.h"

namespace evpool {

void CUDACompletionBackend::check_stream(cudaStream_t stream) const {
  detail::CudaStreams streams;
  StreamCapture capture;
  try {
    capture = streams.capture_of(stream);
  } catch (const CUDAError &) {
    return;  // record() meets the same error and reports it to the request
  }
  if (capture.status == StreamCapture::kNone) return;
  throw std::invalid_argument(
      "evpool::CompletionQueue::notify: " + streams.describe(stream) +
      (capture.status == StreamCapture::kActive ? " is capturing" : " has an invalidated capture") +
      " (capture id " + std::to_string(capture.id) +
      "): its work runs only when the graph is launched; ask for a completion on the stream the graph is "
      "launched on, after cudaGraphLaunch");
}

cudaError_t CUDACompletionBackend::record(cudaStream_t stream, CUDAEvent &event, int &device) noexcept {
  detail::CudaStreams streams;
  try {
    device = streams.device_of(stream, StreamCapture{});
    event = pool_->Get(device);
    streams.record(event.get(), stream, device, /*external=*/false);
    return cudaSuccess;
  } catch (const CUDAError &error) {
    // The request completes with the error, in the FIFO of the stream and device: where the
    // stream could not tell its device, the current one is the best guess (the legacy stream's,
    // and a stream's whose context is current), so the request does not overtake earlier ones.
    if (device < 0 && cudaGetDevice(&device) != cudaSuccess) device = -1;
    return error.error();
  } catch (const std::bad_alloc &) {
    return cudaErrorMemoryAllocation;
  } catch (...) {
    return cudaErrorUnknown;
  }
}

std::optional<cudaError_t> CUDACompletionBackend::query(const CUDAEvent &event) noexcept {
  const detail::DriverEntryPoints &calls = detail::driver();
  if (calls.query_event != nullptr) {
    const CUresult status = detail::with_relaxed_capture(
        calls, [&] { return calls.query_event(reinterpret_cast<CUevent>(event.get())); });
    if (status == CUDA_SUCCESS) return cudaSuccess;
    if (status == CUDA_ERROR_NOT_READY) return std::nullopt;
  }
  // No entry point, or an error: the runtime's query, which sets up a thread without a current
  // context, and names the error in the runtime's terms. The error goes to the request, so it is
  // not left behind as the polling thread's last error.
  const cudaError_t status = detail::with_relaxed_capture(calls, [&] { return cudaEventQuery(event.get()); });
  if (status == cudaErrorNotReady) return std::nullopt;
  if (status != cudaSuccess) (void)cudaGetLastError();
  return status;
}

void CUDACompletionBackend::give_back(CUDAEvent &&event, int device) noexcept {
  if (!event) return;
  try {
    pool_->Put(std::move(event), device);
  } catch (...) {
    // The pool refused it (no node could be allocated) and left it ours: destroyed here.
    const CUDAEvent refused(std::move(event));
  }
}

}  // namespace evpool
