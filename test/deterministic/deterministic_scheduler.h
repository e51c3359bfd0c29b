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

/// Runs thread 0 alone until its `stall_at`-th yield point (1: before its first atomic operation),
/// then every other thread to completion, one after the other, then thread 0 to the end: the
/// schedule of a thread stalled at one point (SIGSTOP, a debugger, a paused VM, swapping) while
/// the others go on. Trying stall_at = 1, 2, ... until stalled() is false tries every point.
class StallStrategy : public Strategy {
 public:
  explicit StallStrategy(int stall_at) : stall_at_(stall_at) {}
  int choose(const std::vector<int> &runnable, int current) override;
  /// Whether thread 0 reached its `stall_at`-th yield point (and was stalled there).
  bool stalled() const { return stalled_; }

 private:
  int stall_at_;
  int yields_of_thread_0_ = 0;
  bool stalled_ = false;
};

class DeterministicScheduler {
 public:
  /// A run that passes more yield points than this aborts the process with a message: it would
  /// otherwise never end (the longest scenario needs about 40,000).
  static constexpr long kMaxStepsPerRun = 10'000'000;

  /// Runs every body on its own thread under `strategy`; returns when all have finished.
  static void run(const std::vector<std::function<void()>> &bodies, Strategy &strategy);
  /// Hands control to whichever thread the strategy picks. A no-op on threads that run() does
  /// not manage, so DeterministicAtomic also works outside a scheduled run (but see StepBudget).
  static void yield_point();
  /// The calling thread cannot progress until another one runs (it spins on a lock, or waits for
  /// a call to end): hands control to another unfinished thread, as if this one were blocked. A
  /// plain yield_point would let the strategy keep running the spinner forever.
  static void yield_to_others();

  /// While one lives, the yield points its thread passes outside a scheduled run count against
  /// kMaxStepsPerRun too: for the set-up and tear-down around runs, where a corrupted pool can
  /// loop forever just as well (its destructor walking a list that has become a cycle).
  class StepBudget {
   public:
    StepBudget();
    ~StepBudget();
    StepBudget(const StepBudget &) = delete;
    StepBudget &operator=(const StepBudget &) = delete;
  };

 private:
  static void hand_over(bool blocked);
};

}  // namespace evpool::testing_support
