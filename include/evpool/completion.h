// evpool: a handle on one completion request: is it done, wait for it, with what status.
//
// Design rationale
// ----------------
// A scheduler that asked for a completion sometimes needs that one answer on a thread of its own
// (a future to finish, a test, shutdown), not only through the callback. The handle shares the
// request with the queue (two references, detail/completion_request.h) and costs nothing to drop:
// a callback-only caller ignores it. It is move-only, like std::future: one owner asks.
//
// "Done" means more than "the GPU finished": the callback has returned (or thrown) and the event
// is back in its pool. A thread that sees ready() can rely on what the callback wrote.
//
// wait() refuses, with std::logic_error, to wait for an unfinished request on a thread that is
// inside a polling pass of the request's own queue (one of its callbacks, or a poll() nested in
// one): only that pass could finish it, and it would wait for itself (detail/polling_thread.h).
#pragma once

#include "evpool/detail/require_cxx20.h"

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

#include "evpool/detail/completion_request.h"
#include "evpool/detail/polling_thread.h"

namespace evpool {

template <class Backend>
class BasicCompletion {
  using request_type = detail::CompletionRequest<Backend>;

 public:
  using status_type = typename Backend::status_type;

  /// An empty handle: valid() is false.
  BasicCompletion() noexcept = default;
  explicit BasicCompletion(request_type *request) noexcept : request_(request) {}
  BasicCompletion(BasicCompletion &&other) noexcept : request_(std::exchange(other.request_, nullptr)) {}
  BasicCompletion &operator=(BasicCompletion &&other) noexcept {
    if (this != &other) {
      reset();
      request_ = std::exchange(other.request_, nullptr);
    }
    return *this;
  }
  ~BasicCompletion() { reset(); }

  bool valid() const noexcept { return request_ != nullptr; }

  /// Whether the request is done: its callback has run and its event is back in its pool.
  /// Thread-safe, wait-free. False for an empty handle.
  bool ready() const noexcept { return request_ != nullptr && request_->done(); }

  /// Blocks until ready(), then returns status(). Spins briefly, then sleeps in the kernel. With a
  /// queue polled by its caller (CompletionPolling::kCaller), someone must call poll() meanwhile.
  /// Thread-safe. Throws std::logic_error for an empty handle, and for a request not ready yet
  /// when the calling thread is polling the request's queue (in one of its callbacks): it would
  /// wait for itself. A request of another queue may be waited for anywhere.
  status_type wait() const {
    require_request("wait");
    if (!request_->done() && detail::polling_here(request_->queue)) [[unlikely]]
      throw std::logic_error(
          "evpool::Completion::wait: called inside a polling pass of the request's own queue (from one of its "
          "callbacks, or a poll() under one), before the request is done: only that pass can finish it, so the "
          "wait would never end; ask for a callback instead, or wait on another thread");
    request_->wait();
    return request_->status;
  }

  /// The status the work ended with (kSuccess, or the error the stream reported). Throws
  /// std::logic_error for an empty handle or one that is not ready().
  status_type status() const {
    require_done("status");
    return request_->status;
  }

  /// What the callback threw or, if it returned, what destroying its captures threw; null if
  /// neither threw. Throws std::logic_error for an empty handle or one that is not ready().
  std::exception_ptr callback_exception() const {
    require_done("callback_exception");
    return request_->callback_exception;
  }

  /// Lets go of the request (the callback still runs). Never throws.
  void reset() noexcept {
    if (request_ != nullptr) std::exchange(request_, nullptr)->release();
  }

 private:
  void require_request(const char *call) const {
    if (request_ == nullptr)
      throw std::logic_error(std::string("evpool::Completion::") + call + ": empty handle");
  }
  void require_done(const char *call) const {
    require_request(call);
    if (!request_->done())
      throw std::logic_error(std::string("evpool::Completion::") + call + ": not ready (call wait() first)");
  }

  request_type *request_ = nullptr;
};

}  // namespace evpool
