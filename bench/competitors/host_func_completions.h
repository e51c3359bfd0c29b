// evpool competitor: completions heard through cudaLaunchHostFunc, CUDA's own answer. Private;
// benchmarks only.
//
// Design rationale
// ----------------
// The baseline every completion mechanism is measured against: no event, no poller of ours. The
// request enqueues a host function behind the work on the stream; the driver runs it on a thread
// of its own once everything before it is done. What it costs is not ours to see: the driver's
// thread spends the CPU (no clock of it is reachable, so the benchmark prints na), and the host
// function is a node in the stream that holds up the stream's next work while it runs, and may
// make no CUDA call.
//
// Each request allocates its callback and frees it when it has run, as a type-erased callback
// must (evpool's queue allocates its request the same way). The host function gets no status
// from CUDA: it runs only if the stream reached it, so the callback is told cudaSuccess; a
// launch that fails calls it at once with the error.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <type_traits>
#include <utility>

namespace evpool::competitors {

class HostFuncCompletions {
 public:
  /// Runs `callback(status)` on the driver's host-function thread once the work enqueued on
  /// `stream` so far is done; at once, on the caller's thread, with the error if the launch
  /// fails. Thread-safe. Throws std::bad_alloc.
  template <class F>
  void notify(cudaStream_t stream, F &&callback) {
    auto call = std::make_unique<Call<std::decay_t<F>>>(std::forward<F>(callback));
    const cudaError_t launched = cudaLaunchHostFunc(stream, &Call<std::decay_t<F>>::run, call.get());
    if (launched != cudaSuccess) {
      call->callback(launched);
      return;
    }
    (void)call.release();  // the host function's now
  }

 private:
  template <class F>
  struct Call {
    explicit Call(F &&f) : callback(std::move(f)) {}
    explicit Call(const F &f) : callback(f) {}
    static void CUDART_CB run(void *data) {
      const std::unique_ptr<Call> call(static_cast<Call *>(data));
      call->callback(cudaSuccess);
    }
    F callback;
  };
};

}  // namespace evpool::competitors
