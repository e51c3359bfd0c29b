#include "deterministic_scheduler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace evpool::testing_support {
namespace {

struct ScheduledRun {
  explicit ScheduledRun(std::size_t threads, Strategy &s)
      : finished(threads, false), spinning(threads, false), strategy(s) {}

  // Picks the next thread to run; called with `mutex` held. Threads spinning on another
  // (yield_to_others since the last step of a thread that made progress) are passed over while
  // any other thread can run, so that spinners cannot hand the CPU to each other forever.
  void pick_next(int current) {
    std::vector<int> runnable, spinners;
    for (std::size_t id = 0; id < finished.size(); ++id)
      if (!finished[id]) (spinning[id] ? spinners : runnable).push_back(static_cast<int>(id));
    if (runnable.empty()) runnable = std::move(spinners);
    if (std::find(runnable.begin(), runnable.end(), current) == runnable.end()) current = -1;
    running = runnable.empty() ? -1 : strategy.choose(runnable, current);
  }

  std::mutex mutex;
  std::condition_variable turn_changed;
  int running = -1;
  long steps = 0;  // yield points passed in this run
  std::vector<bool> finished;
  std::vector<bool> spinning;
  Strategy &strategy;
};

thread_local ScheduledRun *this_run = nullptr;
thread_local int this_id = -1;
thread_local long unscheduled_steps = -1;  // -1: no StepBudget on this thread

void count_step(long &steps) {
  if (++steps <= DeterministicScheduler::kMaxStepsPerRun) return;
  // Only one thread runs, so a run that never ends is a thread spinning forever: a retry loop
  // that can never succeed or a walk along a list that has become a cycle. Say so and stop,
  // rather than hang until the test's timeout.
  std::fprintf(stderr,
               "deterministic scheduler: %ld yield points without an end: a livelock, or a "
               "cycle in a list\n",
               DeterministicScheduler::kMaxStepsPerRun);
  std::abort();
}

}  // namespace

int RandomStrategy::choose(const std::vector<int> &runnable, int) {
  return runnable[std::uniform_int_distribution<std::size_t>(0, runnable.size() - 1)(random_)];
}

int BoundedExhaustiveStrategy::choose(const std::vector<int> &runnable, int current) {
  if (depth_ == path_.size()) {
    Decision decision;
    const bool current_can_go_on = current != -1;
    if (current_can_go_on) decision.options.push_back(current);
    if (!current_can_go_on || preemptions_ < bound_)
      for (int id : runnable)
        if (id != current) decision.options.push_back(id);
    path_.push_back(std::move(decision));
  }
  const Decision &decision = path_[depth_++];
  const int chosen = decision.options[decision.taken];
  if (current != -1 && chosen != current) ++preemptions_;
  return chosen;
}

bool BoundedExhaustiveStrategy::next_schedule() {
  depth_ = 0;
  preemptions_ = 0;
  while (!path_.empty() && path_.back().taken + 1 >= path_.back().options.size()) path_.pop_back();
  if (path_.empty()) return false;
  ++path_.back().taken;
  return true;
}

int StallStrategy::choose(const std::vector<int> &runnable, int current) {
  if (current == 0 && !stalled_ && ++yields_of_thread_0_ == stall_at_) stalled_ = true;
  const bool thread_0_runnable = runnable.front() == 0;
  if (!stalled_) return thread_0_runnable ? 0 : runnable.front();
  if (current > 0) return current;  // each other thread runs to its end
  for (int id : runnable)
    if (id != 0) return id;
  return 0;
}

void DeterministicScheduler::run(const std::vector<std::function<void()>> &bodies, Strategy &strategy) {
  ScheduledRun run(bodies.size(), strategy);
  std::vector<std::thread> threads;
  for (std::size_t id = 0; id < bodies.size(); ++id)
    threads.emplace_back([&run, &body = bodies[id], id] {
      this_run = &run;
      this_id = static_cast<int>(id);
      {
        std::unique_lock<std::mutex> lock(run.mutex);
        run.turn_changed.wait(lock, [&] { return run.running == this_id; });
      }
      body();
      std::lock_guard<std::mutex> lock(run.mutex);
      run.finished[id] = true;
      run.pick_next(-1);
      run.turn_changed.notify_all();
      this_run = nullptr;
    });
  {
    std::lock_guard<std::mutex> lock(run.mutex);
    run.pick_next(-1);
    run.turn_changed.notify_all();
  }
  for (std::thread &thread : threads) thread.join();
}

void DeterministicScheduler::yield_point() { hand_over(false); }

void DeterministicScheduler::yield_to_others() { hand_over(true); }

void DeterministicScheduler::hand_over(bool blocked) {
  ScheduledRun *run = this_run;
  if (run == nullptr) {
    if (unscheduled_steps >= 0) count_step(unscheduled_steps);
    if (blocked) std::this_thread::yield();
    return;
  }
  std::unique_lock<std::mutex> lock(run->mutex);
  count_step(run->steps);
  if (blocked)
    run->spinning[static_cast<std::size_t>(this_id)] = true;
  else
    run->spinning.assign(run->spinning.size(), false);  // progress: every spinner may retry
  run->pick_next(this_id);
  if (run->running == this_id) return;
  run->turn_changed.notify_all();
  run->turn_changed.wait(lock, [&] { return run->running == this_id; });
}

DeterministicScheduler::StepBudget::StepBudget() { unscheduled_steps = 0; }
DeterministicScheduler::StepBudget::~StepBudget() { unscheduled_steps = -1; }

}  // namespace evpool::testing_support
