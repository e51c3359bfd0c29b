// The owners' destruction, and their one instantiation each (cuda_event.h and cuda_stream.h
// declare them extern, so that every user of the shared library calls these).
#include "evpool/cuda_handle.h"

#include <cstdio>
#include <stdexcept>
#include <string>

#include "cuda_runtime_helpers.h"
#include "evpool/cuda_event.h"
#include "evpool/cuda_stream.h"

namespace evpool {
namespace {

cudaError_t destroy_tolerating_exit(cudaEvent_t handle) noexcept {
  return detail::destroy_event_tolerating_exit(handle);
}
cudaError_t destroy_tolerating_exit(cudaStream_t handle) noexcept {
  return detail::destroy_stream_tolerating_exit(handle);
}

const char *destroy_call(cudaEvent_t) noexcept { return "cudaEventDestroy"; }
const char *destroy_call(cudaStream_t) noexcept { return "cudaStreamDestroy"; }

std::string text_of(const void *handle) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", handle);
  return text;
}

}  // namespace

template <class Kind>
void CUDAHandle<Kind>::reset(handle_type handle, int device_id) {
  if (handle != nullptr && handle == handle_) [[unlikely]]
    throw std::invalid_argument("evpool: reset to handle " + text_of(handle) +
                                ", which this owner holds already: it would be destroyed and kept");
  const handle_type old = std::exchange(handle_, handle);
  device_id_ = handle ? device_id : -1;
  if (old) detail::check_cuda(destroy_tolerating_exit(old), destroy_call(old));
}

template <class Kind>
void CUDAHandle<Kind>::destroy_noexcept() noexcept {
  if (handle_) destroy_tolerating_exit(handle_);
  handle_ = nullptr;
  device_id_ = -1;
}

template class CUDAHandle<CUDAEventKind>;
template class CUDAHandle<CUDAStreamKind>;

// The kind is an empty base: an owner is its handle and its device, as DALI's classes are.
struct HandleAndDevice {
  void *handle;
  int device_id;
};
static_assert(sizeof(CUDAEvent) == sizeof(HandleAndDevice) && sizeof(CUDAStream) == sizeof(HandleAndDevice));

}  // namespace evpool
