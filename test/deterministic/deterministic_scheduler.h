// A deterministic scheduler for interleaving tests: runs a few threads so that exactly one runs at
// a time and hands control over only at yield points, which DeterministicAtomic places before
// every atomic operation. A Strategy decides who runs next at each yield point, so a test can
// replay one interleaving, sample many at random from a seed, or enumerate all of them up to a
// preemption bound (as CHESS does). It explores sequentially consistent interleavings only: the
// weak-memory behaviours of relaxed and acquire/release orders are ThreadSanitizer's to check.
#pragma once

#include <cstddef>
#include <functional>
#include <random>
#include <vector>

namespace evpool::testing_support {

class Strategy {
 public:
  virtual ~Strategy() = default;
  /// The thread to run next: one of `runnable` (ids in increasing order). `current` is the thread
  /// at the yield point (it is runnable), or -1 when a thread has just finished.
  virtual int choose(const std::vector<int> &runnable, int current) = 0;
};

/// Picks uniformly at random, from a fixed seed.
class RandomStrategy : public Strategy {
 public:
  explicit RandomStrategy(unsigned seed) : random_(seed) {}
  int choose(const std::vector<int> &runnable, int current) override;

 private:
  std::mt19937 random_;
};

/// Enumerates, one run at a time, every interleaving in which at most `preemption_bound` times a
/// thread that could go on is switched away from. Call next_schedule() after each run.
class BoundedExhaustiveStrategy : public Strategy {
 public:
  explicit BoundedExhaustiveStrategy(int preemption_bound) : bound_(preemption_bound) {}
  int choose(const std::vector<int> &runnable, int current) override;
  /// Moves to the next interleaving; false once all have been run.
  bool next_schedule();

 private:
  struct Decision {
    std::vector<int> options;  // the current thread first: taking it is no preemption
    std::size_t taken = 0;
  };
  int bound_;
  int preemptions_ = 0;
  std::size_t depth_ = 0;
  std::vector<Decision> path_;
};

class DeterministicScheduler {
 public:
  /// Runs every body on its own thread under `strategy`; returns when all have finished.
  static void run(const std::vector<std::function<void()>> &bodies, Strategy &strategy);
  /// Hands control to whichever thread the strategy picks. A no-op on threads that run() does
  /// not manage, so DeterministicAtomic also works outside a scheduled run.
  static void yield_point();
  /// The calling thread cannot progress until another one runs (it spins on a lock or waits for
  /// a call to end): hands control to another unfinished thread, as if this one were blocked. A
  /// plain yield_point would let the strategy keep running the spinner forever.
  static void yield_to_others();

 private:
  static void hand_over(bool blocked);
};

}  // namespace evpool::testing_support
