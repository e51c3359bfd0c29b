// A second thread of a test's own that runs what the test gives it, one job at a time, while the
// test waits: so that a single-threaded test can make some calls from another thread (whose
// thread cache they then use) in a deterministic order.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace evpool::test {

class OtherThread {
 public:
  OtherThread() : thread_([this] { serve(); }) {}
  OtherThread(const OtherThread &) = delete;
  OtherThread &operator=(const OtherThread &) = delete;
  ~OtherThread() {
    run({});  // an empty job ends the thread
    thread_.join();
  }

  /// Runs `job` on the other thread and returns when it has.
  void run(std::function<void()> job) {
    std::unique_lock lock(mutex_);
    job_ = std::move(job);
    pending_ = true;
    changed_.notify_all();
    changed_.wait(lock, [this] { return !pending_; });
  }

 private:
  void serve() {
    for (;;) {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [this] { return pending_; });
      std::function<void()> job = std::move(job_);
      const bool last = !job;
      if (job) job();
      pending_ = false;
      changed_.notify_all();
      if (last) return;
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void()> job_;
  bool pending_ = false;
  std::thread thread_;  // last: started once the members it uses exist
};

}  // namespace evpool::test
