// Checked mode (pool_checks.h): double Puts refused with the pool left consistent, Puts of another
// checked pool's events refused, outstanding events reported when a pool's state is destroyed, and
// the environment variable.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"
#include "support/idle_events.h"

namespace evpool {
namespace {

using Event = HostBackend::Event;
using Token = HostBackend::handle_type;
using Pool = BasicHandlePool<HostBackend>;
using ::testing::HasSubstr;
using ::testing::Not;

// Sets EVPOOL_CHECKED for the scope (unset: nullptr), and restores the value it had after: the
// suites also run under EVPOOL_CHECKED=1 (tools/test), where the tests that follow must still see it.
class ScopedCheckedVariable {
 public:
  explicit ScopedCheckedVariable(const char *value) {
    if (const char *before = std::getenv("EVPOOL_CHECKED")) before_ = before;
    set(value);
  }
  ~ScopedCheckedVariable() { set(before_ ? before_->c_str() : nullptr); }
  ScopedCheckedVariable(const ScopedCheckedVariable &) = delete;
  ScopedCheckedVariable &operator=(const ScopedCheckedVariable &) = delete;

 private:
  static void set(const char *value) {
    if (value != nullptr)
      ::setenv("EVPOOL_CHECKED", value, 1);
    else
      ::unsetenv("EVPOOL_CHECKED");
  }
  std::optional<std::string> before_;
};

// Gets every idle event of each device, until the pool must create: none may come twice.
void expect_no_event_idle_twice(Pool &pool, HostBackend &backend, int devices) {
  for (int device = 0; device < devices; ++device) {
    std::vector<Event> got = testing_support::get_until_a_miss(pool, backend, device);
    std::set<Token> distinct;
    for (const Event &event : got)
      EXPECT_TRUE(distinct.insert(event.get()).second) << "event handed out twice";
    for (Event &event : got) pool.Put(std::move(event));
  }
}

TEST(CheckedPool, ASecondPutOfAnIdleEventIsRefusedAndTheDuplicateIsNotDestroyed) {
  HostBackend backend(2);
  Pool pool(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kOn);
  ASSERT_TRUE(pool.checked());
  const Token token = pool.Get(1).release();  // the caller now owns a bare token
  pool.Put(backend.adopt(token, 1));
  Event duplicate = backend.adopt(token, 1);
  try {
    pool.Put(std::move(duplicate));
    ADD_FAILURE() << "the double Put was accepted";
  } catch (const DoublePutError &error) {
    EXPECT_THAT(error.what(), HasSubstr("event " + std::to_string(token) + " under device 1"));
    EXPECT_THAT(error.what(), HasSubstr("already idle in the pool under device 1"));
  }
  EXPECT_FALSE(duplicate) << "the duplicate is emptied";
  EXPECT_EQ(backend.destroyed(), 0u) << "the pool's idle copy was destroyed through the duplicate";

  // The pool holds the event once: two Gets hand out two different events.
  Event first = pool.Get(1), second = pool.Get(1);
  EXPECT_NE(first.get(), second.get());
  EXPECT_TRUE(first.get() == token || second.get() == token);
  pool.Put(std::move(first));
  pool.Put(std::move(second));
  pool.Purge();
  EXPECT_EQ(backend.created(), backend.destroyed()) << "the pool is consistent after the refusal";
}

// The usual bug when migrating from DALI: an adopted event (device unknown) put with device -1
// twice, from threads whose current devices differ. The second Put files it under another device;
// the checks must refuse it whatever device it names, or two Gets hand the handle to two holders.
TEST(CheckedPool, ASecondPutUnderAnotherDeviceIsRefused) {
  HostBackend backend(2);
  Pool pool(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kOn);
  const Token token = pool.Get(0).release();
  backend.set_current_device(0);
  pool.Put(backend.adopt(token, -1));  // filed under the current device, 0
  backend.set_current_device(1);
  Event duplicate = backend.adopt(token, -1);
  try {
    pool.Put(std::move(duplicate));  // the current device is now 1
    ADD_FAILURE() << "the double Put under another device was accepted";
  } catch (const DoublePutError &error) {
    EXPECT_THAT(error.what(), HasSubstr("under device 1, which is already idle in the pool under device 0"));
  }
  backend.set_current_device(0);
  EXPECT_FALSE(duplicate) << "the duplicate is emptied";
  Event from_1 = pool.Get(1);
  EXPECT_NE(from_1.get(), token) << "device 1 hands out an event that device 0 holds idle";
  Event from_0 = pool.Get(0);
  EXPECT_EQ(from_0.get(), token);
  pool.Put(std::move(from_0));
  pool.Put(std::move(from_1));
  pool.Purge();
  EXPECT_EQ(backend.created(), backend.destroyed()) << "the pool is consistent after the refusal";
}

// An event the pool handed out for device 0, wrapped again as adopted and put under device 1.
TEST(CheckedPool, AnEventPutUnderAnotherDeviceThanItWasGotForIsRefused) {
  HostBackend backend(2);
  Pool pool(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kOn);
  const Token token = pool.Get(0).release();
  Event stray = backend.adopt(token, -1);
  try {
    pool.Put(std::move(stray), 1);
    ADD_FAILURE() << "an event of device 0 was filed under device 1";
  } catch (const std::invalid_argument &error) {
    EXPECT_THAT(error.what(), HasSubstr("under device 1, but the pool handed it out for device 0"));
  }
  ASSERT_TRUE(stray) << "the caller still owns the event";
  pool.Put(std::move(stray), 0);
  pool.Purge();
  EXPECT_EQ(backend.created(), backend.destroyed());
}

TEST(CheckedPool, ALeaseEndingOnAnIdleCopyDoesNotDestroyIt) {
  HostBackend backend(1);
  Pool pool(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kOn);
  {
    auto lease = pool.Lease(0);
    pool.Put(backend.adopt(lease.get(), 0));  // misuse: the leased event put back by hand
  }                                           // the lease ends on an event already idle
  EXPECT_EQ(backend.destroyed(), 0u);
  Event first = pool.Get(0), second = pool.Get(0);
  EXPECT_NE(first.get(), second.get()) << "the event is in the pool once";
  pool.Put(std::move(first));
  pool.Put(std::move(second));
}

TEST(CheckedPool, AContradictingDeviceIsStillAnErrorAndTheCallerKeepsItsEvent) {
  HostBackend backend(2);
  Pool pool(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kOn);
  Event event = pool.Get(0);
  EXPECT_THROW(pool.Put(std::move(event), 1), std::invalid_argument);
  ASSERT_TRUE(event);
  pool.Put(std::move(event));
}

// Every thread puts each of its events twice, on a device of its own: every second Put is refused
// (the event is still idle), and afterwards no event is handed out twice and none is lost.
TEST(CheckedPool, DoublePutsFromManyThreadsAreAllRefusedAndThePoolStaysConsistent) {
  constexpr int kThreads = 6, kRounds = 500;
  HostBackend backend(kThreads);
  {
    Pool pool(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kOn);
    std::atomic<int> refused{0}, accepted_twice{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, device = t] {
        for (int round = 0; round < kRounds; ++round) {
          const Token token = pool.Get(device).release();
          pool.Put(backend.adopt(token, device));
          try {
            pool.Put(backend.adopt(token, device));
            accepted_twice.fetch_add(1);
          } catch (const DoublePutError &) {
            refused.fetch_add(1);
          }
        }
      });
    for (std::thread &thread : threads) thread.join();
    EXPECT_EQ(refused.load(), kThreads * kRounds);
    EXPECT_EQ(accepted_twice.load(), 0);
    EXPECT_EQ(backend.destroyed(), 0u);
    expect_no_event_idle_twice(pool, backend, kThreads);
  }
  EXPECT_EQ(backend.created(), backend.destroyed()) << "every event created was destroyed once";
}

// Threads sharing a device: a duplicate Put is caught while its event is idle; once another
// thread has got the event again, the duplicate passes for that holder's return, and the holder's
// own Put is refused instead (a handle alone cannot tell the two apart; pool_checks.h). Either
// way the pool never holds an event twice and loses none.
TEST(CheckedPool, DoublePutsRacingWithOtherThreadsGetsLeaveThePoolConsistent) {
  HostBackend backend(1);
  {
    Pool pool(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kOn);
    std::atomic<int> refused{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 6; ++t)
      threads.emplace_back([&] {
        for (int round = 0; round < 500; ++round) {
          const Token token = pool.Get(0).release();
          for (int put = 0; put < 2; ++put) {
            try {
              pool.Put(backend.adopt(token, 0));
            } catch (const DoublePutError &) {
              refused.fetch_add(1);
            }
          }
        }
      });
    for (std::thread &thread : threads) thread.join();
    EXPECT_GE(refused.load(), 1);
    EXPECT_EQ(backend.destroyed(), 0u) << "a refused duplicate destroyed the pool's copy";
    expect_no_event_idle_twice(pool, backend, 1);
  }
  EXPECT_EQ(backend.created(), backend.destroyed()) << "every event created was destroyed once";
}

// Across pools (handle_checker.h): a Put of an event that another checked pool handed out is
// refused, whether the event still records its device or was wrapped bare again (adopted); the
// caller keeps it, and both pools stay consistent.
TEST(CheckedPool, AnEventHandedOutByAnotherCheckedPoolIsRefusedAndTheCallerKeepsIt) {
  HostBackend backend(1);
  Pool lender(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kOn);
  Pool other(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kOn);
  for (const bool bare : {false, true}) {
    Event event = lender.Get(0);
    const Token token = event.get();
    if (bare) event = backend.adopt(event.release(), -1);
    try {
      other.Put(std::move(event));
      ADD_FAILURE() << "another pool's event was accepted (" << (bare ? "adopted" : "as got") << ")";
    } catch (const DoublePutError &) {
      ADD_FAILURE() << "refused as a double Put: the caller's event was emptied";
    } catch (const std::invalid_argument &error) {
      EXPECT_THAT(error.what(), HasSubstr("Put of event " + std::to_string(token) +
                                          " under device 0 into a pool "
                                          "that never handed it out: another checked pool handed it out"));
      EXPECT_THAT(error.what(), HasSubstr("the caller still owns the event"));
    }
    ASSERT_TRUE(event) << "the caller still owns the event";
    Event fresh = other.Get(0);
    EXPECT_NE(fresh.get(), token) << "the refused event went into the other pool";
    other.Put(std::move(fresh));
    lender.Put(std::move(event));  // where it belongs: accepted
  }
  lender.Purge();
  other.Purge();
  EXPECT_EQ(backend.created(), backend.destroyed()) << "both pools are consistent after the refusals";
}

// A duplicate of an event idle in another checked pool is a double Put there: refused, emptied
// without destroying the handle, which that pool holds.
TEST(CheckedPool, ADuplicateOfAnEventIdleInAnotherCheckedPoolIsADoublePut) {
  HostBackend backend(1);
  Pool holder(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kOn);
  Pool other(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kOn);
  const Token token = holder.Get(0).release();
  holder.Put(backend.adopt(token, 0));
  Event duplicate = backend.adopt(token, -1);
  try {
    other.Put(std::move(duplicate));
    ADD_FAILURE() << "a duplicate of an event idle in another pool was accepted";
  } catch (const DoublePutError &error) {
    EXPECT_THAT(error.what(), HasSubstr("event " + std::to_string(token) +
                                        " under device 0, which is idle in "
                                        "another checked pool under device 0"));
  }
  EXPECT_FALSE(duplicate) << "the duplicate is emptied";
  EXPECT_EQ(backend.destroyed(), 0u) << "the other pool's idle copy was destroyed through the duplicate";
  Event fresh = other.Get(0);
  EXPECT_NE(fresh.get(), token) << "both pools hold the event";
  other.Put(std::move(fresh));
  EXPECT_EQ(holder.Get(0).release(), token);
  holder.Put(backend.adopt(token, 0));
}

// Tokens of another backend are other handles, as events of one process are (host_backend.h):
// a checked pool takes them as from outside, however their serial numbers compare.
TEST(CheckedPool, AnotherBackendsTokensAreNotTakenForThePoolsOwn) {
  HostBackend backend(1), outsider(1);
  Pool pool(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kOn);
  Event held = pool.Get(0);  // serial 1 of `backend`, outstanding
  pool.Put(pool.Get(0));     // serial 2, idle
  EXPECT_NO_THROW(pool.Put(outsider.adopt(outsider.create(0, 0), -1))) << "serial 1 of the outsider";
  EXPECT_NO_THROW(pool.Put(outsider.adopt(outsider.create(0, 0), -1))) << "serial 2 of the outsider";
  pool.Put(std::move(held));
  EXPECT_EQ(pool.stats().devices[0].idle, 4u);
}

// What must still be accepted: a bare handle that no pool handed out, and an event whose pool is
// gone (its checker left the list with it).
TEST(CheckedPool, AdoptedHandlesThatNoLivePoolHandedOutAreStillAccepted) {
  HostBackend backend(1);
  Pool pool(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kOn);
  Pool bystander(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kOn);
  Event bystanders = bystander.Get(0);  // another checked pool with an event out
  pool.Put(backend.adopt(backend.create(0, 0), -1));
  Event orphan;
  testing::internal::CaptureStderr();
  {
    Pool gone(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kOn);
    orphan = gone.Get(0);
  }  // reports `orphan` as outstanding
  (void)testing::internal::GetCapturedStderr();
  pool.Put(std::move(orphan));
  EXPECT_EQ(pool.stats().devices[0].idle, 2u);
  bystander.Put(std::move(bystanders));
}

TEST(CheckedPool, OutstandingEventsAreReportedWithWhereTheyWereGot) {
  HostBackend backend(2);
  std::vector<Event> kept;
  testing::internal::CaptureStderr();
  {
    Pool pool(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kOn);
    kept.push_back(pool.Get(1));
    kept.push_back(pool.Get(1));
    pool.Put(pool.Get(0));
  }
  const std::string report = testing::internal::GetCapturedStderr();
  EXPECT_THAT(report, HasSubstr("events still outstanding"));
  EXPECT_THAT(report, HasSubstr("device 1: 2 outstanding"));
  EXPECT_THAT(report, Not(HasSubstr("device 0")));
  EXPECT_THAT(report, HasSubstr("event " + std::to_string(kept[0].get()) + ", got at:"));
}

// The report gives the command that names each frame's function and line; run, it finds the Get
// in this file.
TEST(CheckedPool, TheReportSaysHowToGetTheFunctionsAndLinesOfAGet) {
  if (std::system("addr2line --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "needs addr2line (binutils)";
  HostBackend backend(1);
  std::vector<Event> kept;
  testing::internal::CaptureStderr();
  {
    Pool pool(backend, HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kOn);
    kept.push_back(pool.Get(0));
  }
  const std::string report = testing::internal::GetCapturedStderr();
  std::string lines_of_this_program;
  for (std::size_t at = report.find("names and lines: "); at != std::string::npos;
       at = report.find("names and lines: ", at + 1)) {
    const std::string command = report.substr(at + 17, report.find('\n', at) - at - 17);
    if (command.find("evpool_unit_tests") == std::string::npos) continue;  // a shared library's frames
    std::FILE *output = popen((command + " 2>&1").c_str(), "r");
    ASSERT_NE(output, nullptr);
    char buffer[4096];
    for (std::size_t read; (read = std::fread(buffer, 1, sizeof buffer, output)) > 0;)
      lines_of_this_program.append(buffer, read);
    pclose(output);
  }
  EXPECT_THAT(lines_of_this_program, HasSubstr("pool_checks_test.cc:")) << report;
  EXPECT_THAT(lines_of_this_program, HasSubstr("BasicHandlePool")) << report;
}

TEST(UncheckedPool, OutstandingEventsAreReportedAsCounts) {
  const ScopedCheckedVariable off("0");  // unchecked, also in the suites' EVPOOL_CHECKED=1 run
  HostBackend backend(2);
  std::vector<Event> kept;
  testing::internal::CaptureStderr();
  {
    Pool pool(backend);
    kept.push_back(pool.Get(1));
    pool.Put(pool.Get(0));
  }
  const std::string report = testing::internal::GetCapturedStderr();
  EXPECT_THAT(report, HasSubstr("device 1: 1 outstanding (EVPOOL_CHECKED=1 shows where each was got)"));
  EXPECT_THAT(report, Not(HasSubstr("device 0")));
}

TEST(UncheckedPool, APoolWithNothingOutstandingReportsNothing) {
  const ScopedCheckedVariable off("0");
  HostBackend backend(2);
  testing::internal::CaptureStderr();
  {
    Pool pool(backend);
    Event event = pool.Get(1);
    pool.Put(std::move(event));
    auto lease = pool.Lease(0);
  }
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(CheckedEnvironment, OneTurnsChecksOnForAnUnchangedPool) {
  const ScopedCheckedVariable on("1");
  Pool pool{HostBackend(1)};
  EXPECT_TRUE(pool.checked());
}

TEST(CheckedEnvironment, ZeroEmptyOrUnsetLeaveThemOffAndKOnStillWins) {
  for (const char *value : {"0", "", static_cast<const char *>(nullptr)}) {
    const ScopedCheckedVariable off(value);
    EXPECT_FALSE(Pool{HostBackend(1)}.checked()) << (value ? value : "(unset)");
    EXPECT_TRUE(Pool(HostBackend(1), HostBackend::kDefaultOptions, kUnlimitedIdle, Checks::kOn).checked());
  }
}

// The tests that set the variable leave it as they found it: the suites' EVPOOL_CHECKED=1 run
// must stay checked past them.
TEST(CheckedEnvironment, ATestThatSetsTheVariableRestoresIt) {
  const ScopedCheckedVariable outer("1");
  { const ScopedCheckedVariable inner("0"); }
  EXPECT_TRUE(Pool{HostBackend(1)}.checked());
  { const ScopedCheckedVariable inner(nullptr); }
  EXPECT_STREQ(std::getenv("EVPOOL_CHECKED"), "1");
}

TEST(CheckedEnvironment, AnyOtherValueIsRefusedByName) {
  const ScopedCheckedVariable bad("yes");
  try {
    Pool pool{HostBackend(1)};
    ADD_FAILURE() << "no exception";
  } catch (const std::invalid_argument &error) {
    EXPECT_THAT(error.what(), HasSubstr("EVPOOL_CHECKED=yes"));
  }
}

}  // namespace
}  // namespace evpool
