// evpool: CUDACompletionBackend (completion_queue.h).
#include "evpool/completion_queue.h"

#include <cuda.h>

#include <cstdint>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>

#include "driver_entry_points.h"
#include "evpool/detail/cuda_streams.h"

namespace evpool {
namespace {

bool is_special_handle(cudaStream_t stream) {
  return stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
}

// The stream's id, unique for the process's life, or nothing if it cannot be read. A created
// stream's through the driver: one call per request, the price of telling a stream from the next
// one to get its handle. The special handles' through the runtime, as the rest of the library
// asks about them: they mean a stream of the current device's context, which the runtime sets up
// if the thread has none yet. Whatever ids those get, the queue's key keeps threads and devices
// apart (stream_fifos.h).
std::optional<std::uint64_t> id_of(cudaStream_t stream) noexcept {
  unsigned long long id = 0;
  const detail::DriverEntryPoints &calls = detail::driver();
  if (!is_special_handle(stream) && calls.get_id != nullptr) {
    if (calls.get_id(reinterpret_cast<CUstream>(stream), &id) == CUDA_SUCCESS) return id;
    return std::nullopt;  // the record meets the same error, if it is one of the stream's
  }
  if (cudaStreamGetId(stream, &id) == cudaSuccess) return id;
  (void)cudaGetLastError();  // not left behind as the caller's last error
  return std::nullopt;
}

}  // namespace

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

cudaError_t CUDACompletionBackend::record(cudaStream_t stream, CUDAEvent &event, RecordedOn &on) noexcept {
  detail::CudaStreams streams;
  try {
    // First, so that a request whose record fails keeps its place in its stream's FIFO.
    on.stream_id = id_of(stream);
    on.device = streams.device_of(stream, StreamCapture{});
    event = pool_->Get(on.device);
    streams.record(event.get(), stream, on.device, /*external=*/false);
    return cudaSuccess;
  } catch (const CUDAError &error) {
    // The request completes with the error, in the FIFO of the stream and device: where the
    // stream could not tell its device, the current one is the best guess (the legacy stream's,
    // and a stream's whose context is current), so the request does not overtake earlier ones
    // (if the stream's id could be read: without it, the request has a FIFO of its own).
    if (on.device < 0 && cudaGetDevice(&on.device) != cudaSuccess) on.device = -1;
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
