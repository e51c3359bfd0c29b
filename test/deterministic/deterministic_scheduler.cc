#include "deterministic_scheduler.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace evpool::testing_support {
namespace {

struct ScheduledRun {
  explicit ScheduledRun(std::size_t threads, Strategy &s) : finished(threads, false), strategy(s) {}

  // Picks the next thread to run, never `blocked` unless it is the only one left; called with
  // `mutex` held.
  void pick_next(int current, int blocked = -1) {
    std::vector<int> runnable;
    for (std::size_t id = 0; id < finished.size(); ++id)
      if (!finished[id] && static_cast<int>(id) != blocked) runnable.push_back(static_cast<int>(id));
    if (runnable.empty() && blocked != -1) runnable.push_back(blocked);
    running = runnable.empty() ? -1 : strategy.choose(runnable, current);
  }

  std::mutex mutex;
  std::condition_variable turn_changed;
  int running = -1;
  std::vector<bool> finished;
  Strategy &strategy;
};

thread_local ScheduledRun *this_run = nullptr;
thread_local int this_id = -1;

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
    if (blocked) std::this_thread::yield();
    return;
  }
  std::unique_lock<std::mutex> lock(run->mutex);
  if (blocked)
    run->pick_next(-1, this_id);
  else
    run->pick_next(this_id);
  if (run->running == this_id) return;
  run->turn_changed.notify_all();
  run->turn_changed.wait(lock, [&] { return run->running == this_id; });
}

}  // namespace evpool::testing_support
