// evpool tests: the fixture of every test of a completion queue over HostCompletionBackend: a
// host event pool of two devices, the backend over it and, at the end of each test, the backend's
// check that no request was finished before its own work was done (host_completion_backend.h).
// `Base` is gtest's base class (testing::TestWithParam<P> for parameterised suites).
#pragma once

#include <gtest/gtest.h>

#include "evpool/host_backend.h"
#include "host_completion_backend.h"

namespace evpool::test {

template <class Base = testing::Test>
class HostCompletionFixture : public Base {
 protected:
  void TearDown() override {
    EXPECT_EQ(backend_.early_finishes(), 0u)
        << "requests finished before their work was done; the first: " << backend_.first_early_finish();
  }

  HostBackend events_{2};
  HostCompletionBackend::pool_type pool_{events_};
  HostCompletionBackend backend_{pool_};
};

}  // namespace evpool::test
