// evpool: CUDACompletionBackend (completion_queue.h).
#include "evpool/completion_queue.h"

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <cstring>
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

// Whether `device` can take a 64-bit stream memory write: CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_-
// STREAM_MEM_OPS (CUDA 12 and later; the _V1 attributes 92 and 93 are deprecated with the v1
// memory-operation API, and CUDA 12 enables the operations without the kernel module's
// NVreg_EnableStreamMemOPs). Asked once per device, then kept (a device's attribute does not
// change while the process runs). Devices beyond the table are asked every time.
bool can_signal_on(int device) noexcept {
  constexpr int kKnownDevices = 64;
  static std::atomic<std::int8_t> known[kKnownDevices] = {};  // 0: not asked; 1: yes; 2: no
  if (device < 0) return false;
  // Relaxed: the answer is the same whoever asks; a race asks twice.
  if (device < kKnownDevices) {
    if (const std::int8_t answer = known[device].load(std::memory_order_relaxed); answer != 0)
      return answer == 1;
  }
  const detail::DriverEntryPoints &calls = detail::driver();
  bool can = false;
  CUdevice handle = 0;
  int attribute = 0;
  if (calls.write_value64 != nullptr && calls.get_device_handle != nullptr &&
      calls.get_device_attribute != nullptr && calls.get_device_handle(&handle, device) == CUDA_SUCCESS &&
      calls.get_device_attribute(&attribute, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, handle) == CUDA_SUCCESS)
    can = attribute != 0;
  if (device < kKnownDevices) known[device].store(can ? 1 : 2, std::memory_order_relaxed);
  return can;
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
  return record(stream, event, on, SignalSlot{});
}

cudaError_t CUDACompletionBackend::record(cudaStream_t stream, CUDAEvent &event, RecordedOn &on,
                                          const SignalSlot &signal) noexcept {
  detail::CudaStreams streams;
  try {
    // First, so that a request whose record fails keeps its place in its stream's FIFO.
    on.stream_id = id_of(stream);
    on.device = streams.device_of(stream, StreamCapture{});
    event = pool_->Get(on.device);
    // The signal before the event: a completed event then also means the write was made. Only on
    // created streams: the special handles mean a stream of the thread's current context to the
    // driver, which need not be the runtime's device (they are heard through their events).
    if (signal.word != nullptr && !is_special_handle(stream) && can_signal_on(on.device)) {
      // CU_STREAM_WRITE_VALUE_DEFAULT: the write is preceded by a memory fence of the stream's
      // work, with the semantics of __threadfence_system() (completion_backend.h). The device
      // address is the host address: allocate_signal_words() checked that (unified addressing).
      const CUresult written = detail::driver().write_value64(reinterpret_cast<CUstream>(stream),
                                                              reinterpret_cast<CUdeviceptr>(signal.word),
                                                              signal.value, CU_STREAM_WRITE_VALUE_DEFAULT);
      // Refused: the request is heard through its event (whose record reports a stream's error).
      on.signalled = written == CUDA_SUCCESS;
    }
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

// The allocation and the free run on a thread that may be capturing another stream (its first
// request, or the queue's destruction, inside a capture of its own): in global or thread-local
// mode cudaHostAlloc and cudaFreeHost are among the calls a capturing thread may not make, and
// the refusal invalidates the capture and, for the allocation, turns the queue's signals off for
// good (SignalSlotPool keeps the failure). Relaxed mode for their duration, as PyTorch's host
// allocator does around cudaHostAlloc: neither is captured, and no capture depends on them.
std::uint64_t *CUDACompletionBackend::allocate_signal_words(std::size_t count) noexcept {
  const detail::DriverEntryPoints &calls = detail::driver();
  if (calls.write_value64 == nullptr) return nullptr;  // no driver support: events
  return detail::with_relaxed_capture(calls, [count]() noexcept -> std::uint64_t * {
    void *words = nullptr;
    // Portable: pinned for every context; mapped: the devices can write it.
    if (cudaHostAlloc(&words, count * sizeof(std::uint64_t), cudaHostAllocPortable | cudaHostAllocMapped) !=
        cudaSuccess) {
      (void)cudaGetLastError();  // no device, or no memory: the queue queries events
      return nullptr;
    }
    // The writes name the word by its host address: that needs the device address to be the same
    // (unified addressing, every 64-bit Linux platform CUDA 12 supports).
    void *on_device = nullptr;
    if (cudaHostGetDevicePointer(&on_device, words, 0) != cudaSuccess || on_device != words) {
      (void)cudaGetLastError();
      (void)cudaFreeHost(words);
      return nullptr;
    }
    std::memset(words, 0, count * sizeof(std::uint64_t));
    return static_cast<std::uint64_t *>(words);
  });
}

void CUDACompletionBackend::free_signal_words(std::uint64_t *words, std::size_t /*count*/) noexcept {
  // At process exit CUDA may be unloading already: the memory goes with the process.
  const detail::DriverEntryPoints &calls = detail::driver();
  if (detail::with_relaxed_capture(calls, [words]() noexcept { return cudaFreeHost(words); }) != cudaSuccess)
    (void)cudaGetLastError();
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
