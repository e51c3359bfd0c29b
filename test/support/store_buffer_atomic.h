// evpool test support: atomics over a model of store buffers, so that a test can show, in a
// scripted order and on one OS thread, what a memory order weaker than seq_cst lets through.
//
// The model is x86-TSO's store buffer, read at the C++ orders. Each simulated thread
// (SimulatedThread) queues its stores and read-modify-writes that are weaker than seq_cst; the
// other simulated threads see none of them until the queue drains, oldest first, which the
// thread's next seq_cst store or read-modify-write does before it acts (as the fence or locked
// instruction that seq_cst costs on x86 does), and drain() does (a system call, the end of the
// thread). A thread's loads see its own queued stores first. So a release store followed by a
// load of another word lets that load go first, as in the store-buffering litmus test (Dekker's
// pattern), and a seq_cst store does not.
//
// What it does not model:
// - loads weaker than seq_cst: every load reads memory at once here, as on x86. On Arm, an
//   acquire load after a release store may be satisfied first (LDAPR), and the model cannot show
//   that;
// - a queued read-modify-write's atomicity against other threads' (it reads when it is queued):
//   the scripts never race two on one word.
//
// Only the operations the completion queue's doorbell and channels use are provided.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace evpool::testing_support {

/// A simulated thread: its queue of stores not yet visible to the others.
class SimulatedThread {
 public:
  SimulatedThread() = default;
  SimulatedThread(const SimulatedThread &) = delete;
  SimulatedThread &operator=(const SimulatedThread &) = delete;

  /// Runs `body` as this thread: the StoreBufferAtomic operations it makes use this queue.
  template <class Body>
  void run(Body &&body) {
    SimulatedThread *outer = std::exchange(running_, this);
    std::forward<Body>(body)();
    running_ = outer;
  }

  /// Makes every queued store visible, oldest first.
  void drain() noexcept {
    for (const Store &store : queue_) store.apply(store.word, store.bits);
    queue_.clear();
  }

 private:
  template <class T>
  friend class StoreBufferAtomic;

  struct Store {
    void *word;
    std::uint64_t bits;
    void (*apply)(void *word, std::uint64_t bits) noexcept;
  };

  // Not thread_local: the simulation runs on one OS thread.
  static inline SimulatedThread *running_ = nullptr;

  std::vector<Store> queue_;
};

/// std::atomic's interface over the model (see the top); outside SimulatedThread::run, a plain
/// std::atomic. The same size as T, so that a futex may name it.
template <class T>
class StoreBufferAtomic {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(std::uint64_t));

 public:
  StoreBufferAtomic() noexcept : memory_() {}
  constexpr StoreBufferAtomic(T value) noexcept : memory_(value) {}  // NOLINT: mirrors std::atomic
  StoreBufferAtomic(const StoreBufferAtomic &) = delete;
  StoreBufferAtomic &operator=(const StoreBufferAtomic &) = delete;

  T load(std::memory_order order = std::memory_order_seq_cst) const noexcept {
    if (const std::optional<T> queued = own_queued()) return *queued;
    return memory_.load(order);
  }
  void store(T value, std::memory_order order = std::memory_order_seq_cst) noexcept { write(value, order); }
  T exchange(T value, std::memory_order order = std::memory_order_seq_cst) noexcept {
    const T seen = read_for_update(order);
    write(value, order);
    return seen;
  }
  bool compare_exchange_weak(T &expected, T desired, std::memory_order success, std::memory_order failure) noexcept {
    return compare_exchange_strong(expected, desired, success, failure);
  }
  bool compare_exchange_strong(T &expected, T desired, std::memory_order success, std::memory_order failure) noexcept {
    const T seen = read_for_update(success == std::memory_order_seq_cst ? success : failure);
    if (seen != expected) {
      expected = seen;
      return false;
    }
    write(desired, success);
    return true;
  }

 private:
  static std::uint64_t bits_of(T value) noexcept {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof(T));
    return bits;
  }
  static T value_of(std::uint64_t bits) noexcept {
    T value;
    std::memcpy(&value, &bits, sizeof(T));
    return value;
  }
  static void apply(void *word, std::uint64_t bits) noexcept {
    static_cast<StoreBufferAtomic *>(word)->memory_.store(value_of(bits), std::memory_order_seq_cst);
  }

  // The running thread's latest queued store to this word, if any.
  std::optional<T> own_queued() const noexcept {
    const SimulatedThread *thread = SimulatedThread::running_;
    if (thread == nullptr) return std::nullopt;
    for (auto store = thread->queue_.rbegin(); store != thread->queue_.rend(); ++store)
      if (store->word == this) return value_of(store->bits);
    return std::nullopt;
  }

  // A read-modify-write's read: a seq_cst one drains the thread's queue first.
  T read_for_update(std::memory_order order) noexcept {
    if (SimulatedThread *thread = SimulatedThread::running_; thread != nullptr && order == std::memory_order_seq_cst)
      thread->drain();
    return load(std::memory_order_seq_cst);
  }

  void write(T value, std::memory_order order) noexcept {
    SimulatedThread *thread = SimulatedThread::running_;
    if (thread == nullptr) {
      memory_.store(value, std::memory_order_seq_cst);
      return;
    }
    if (order == std::memory_order_seq_cst) {
      thread->drain();
      memory_.store(value, std::memory_order_seq_cst);
      return;
    }
    thread->queue_.push_back({this, bits_of(value), &apply});
  }

  std::atomic<T> memory_;
};

}  // namespace evpool::testing_support
