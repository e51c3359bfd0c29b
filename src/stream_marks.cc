#include "stream_marks.h"

#include <new>

#include "driver_entry_points.h"
#include "evpool/detail/fork_guard.h"

namespace evpool::detail {

namespace {

// A mark takes a line of its own: the device writes it, and host reads of its neighbours should
// not miss each time it does.
constexpr std::size_t kSlotBytes = 64;
constexpr std::size_t kSlotsPerChunk = 64;  // one 4 KiB page of pinned memory

}  // namespace

StreamMarks::~StreamMarks() {
  // The streams are destroyed by now (the pool's end): a record whose write may still be pending
  // keeps its chunk alive, which only the process's end reclaims.
  bool pending_write = false;
  records_.clear([&](std::uintptr_t, StreamMark *mark) {
    if (mark->reached->load(std::memory_order_acquire) != mark->expected) pending_write = true;
    delete mark;
  });
  for (StreamMark *mark : free_marks_) delete mark;
  if (!pending_write && fork_generation_ == fork_generation())
    for (void *chunk : chunks_) (void)cudaFreeHost(chunk);
}

StreamMark *StreamMarks::new_mark() noexcept {
  if (free_marks_.empty()) {
    void *chunk = nullptr;
    // In relaxed capture mode: pinning memory while another thread captures in global mode would
    // otherwise invalidate that capture (a pooled stream's Get or hand-back has no capture of its own).
    const DriverEntryPoints &calls = driver();
    if (with_relaxed_capture(calls, [&] {
          return cudaHostAlloc(&chunk, kSlotBytes * kSlotsPerChunk, cudaHostAllocPortable | cudaHostAllocMapped);
        }) != cudaSuccess) {
      (void)cudaGetLastError();  // answered by asking the driver for this stream
      return nullptr;
    }
    void *device_view = nullptr;
    try {
      chunks_.push_back(chunk);
      free_marks_.reserve(free_marks_.size() + kSlotsPerChunk);
      if (cudaHostGetDevicePointer(&device_view, chunk, 0) != cudaSuccess) throw std::bad_alloc();
      for (std::size_t slot = 0; slot < kSlotsPerChunk; ++slot) {
        auto *mark = new StreamMark;
        auto *bytes = static_cast<unsigned char *>(chunk) + slot * kSlotBytes;
        mark->reached = new (bytes) std::atomic<std::uint32_t>(0);
        mark->address = reinterpret_cast<CUdeviceptr>(static_cast<unsigned char *>(device_view) + slot * kSlotBytes);
        free_marks_.push_back(mark);
      }
    } catch (...) {
      (void)cudaGetLastError();
      if (free_marks_.empty()) return nullptr;  // the chunk stays listed, freed at the end
    }
  }
  StreamMark *mark = free_marks_.back();
  free_marks_.pop_back();
  return mark;
}

void StreamMarks::forget_parents_slots() noexcept {
  if (fork_generation_ == fork_generation()) return;
  // A fork child: the records and slots are the parent's, and their memory is not pinned for this
  // process's context. Leaked, as the parent's streams are.
  fork_generation_ = fork_generation();
  free_marks_.clear();
  chunks_.clear();
  records_.clear([](std::uintptr_t, StreamMark *) {});
}

void StreamMarks::add(cudaStream_t stream) noexcept {
  std::lock_guard lock(slots_lock_);
  forget_parents_slots();
  StreamMark *mark = new_mark();
  if (mark == nullptr) return;
  try {
    // A record left by a stream that had this handle and left without remove() (a Get of the
    // pool's own Get, not a lease) had no write pending: it goes back to the free ones.
    if (StreamMark *stale = records_.put(reinterpret_cast<std::uintptr_t>(stream), mark)) free_marks_.push_back(stale);
  } catch (...) {
    free_marks_.push_back(mark);  // reserved room: cannot throw
  }
}

void StreamMarks::remove(cudaStream_t stream) noexcept {
  StreamMark *mark = records_.remove(reinterpret_cast<std::uintptr_t>(stream));
  if (mark == nullptr) return;
  std::lock_guard lock(slots_lock_);
  if (fork_generation_ != fork_generation()) return;  // a parent's: forgotten
  // A write still pending (a busy stream destroyed) would land on the next stream's mark: the slot
  // is kept out of use.
  if (mark->reached->load(std::memory_order_acquire) != mark->expected) return;
  try {
    free_marks_.push_back(mark);
  } catch (...) {
  }
}

void StreamMarks::mark_handed_back(cudaStream_t stream) noexcept {
  StreamMark *mark = records_.find(reinterpret_cast<std::uintptr_t>(stream));
  if (mark == nullptr) {  // adopted: first seen here
    add(stream);
    if ((mark = records_.find(reinterpret_cast<std::uintptr_t>(stream))) == nullptr) return;
  }
  const DriverEntryPoints &calls = driver();
  const std::uint32_t next = mark->expected + 1;
  CUresult written = CUDA_ERROR_NOT_SUPPORTED;
  if (calls.write_value != nullptr) {
    written = calls.write_value(reinterpret_cast<CUstream>(stream), mark->address, next, CU_STREAM_WRITE_VALUE_DEFAULT);
    if (written == CUDA_ERROR_INVALID_CONTEXT || written == CUDA_ERROR_INVALID_HANDLE ||
        written == CUDA_ERROR_CONTEXT_IS_DESTROYED) {
      // Handed back from a thread whose current context is another device's: in the stream's own.
      CUcontext context = nullptr;
      if (calls.know_contexts() && calls.get_context(reinterpret_cast<CUstream>(stream), &context) == CUDA_SUCCESS &&
          calls.push_context(context) == CUDA_SUCCESS) {
        written = calls.write_value(reinterpret_cast<CUstream>(stream), mark->address, next,
                                    CU_STREAM_WRITE_VALUE_DEFAULT);
        CUcontext popped = nullptr;
        (void)calls.pop_context(&popped);
      }
    }
  }
  mark->written = written == CUDA_SUCCESS;
  if (mark->written) mark->expected = next;
}

}  // namespace evpool::detail
