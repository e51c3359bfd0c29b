// The cap per device (pool_cap.h) as a bound: at most the cap of a device's handles exist through
// the pool at once, handed out, idle or retired, whatever order Gets and Puts come in; a handle
// from outside takes a place, and at the cap its Put is refused with the caller still owning it;
// GetWithin and LeaseWithin end a wait at the cap with an error that names the device, the cap and
// what this process holds. For events and for the stream seam, with caches and without.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "evpool/basic_handle_pool.h"
#include "evpool/host_backend.h"
#include "evpool/pool_cap.h"
#include "evpool/pool_checks.h"
#include "pool_policies.h"
#include "support/host_stream_backend.h"

namespace evpool {
namespace {

using std::chrono::nanoseconds;

template <class Backend, class Policy>
using Config = test::BackendAndPolicy<Backend, Policy>;
using Configs =
    ::testing::Types<Config<HostBackend, DefaultPoolPolicy>, Config<HostBackend, NoCachePolicy<>>,
                     Config<test::HostStreamBackend, StreamPoolPolicy>, Config<test::HostStreamBackend, NoCachePolicy<>>>;
using ConfigName = test::BackendAndPolicyName;

template <class C>
class PoolCap : public ::testing::Test {
 protected:
  using Backend = typename C::Backend;
  using Pool = BasicHandlePool<Backend, typename C::Policy>;
  using Owner = typename Pool::owner_type;
  static constexpr std::size_t kCap = 4;

  Backend backend{1};
  Pool pool{backend, Backend::kDefaultOptions, kUnlimitedIdle, Checks::kDefault, kCap};

  std::uint64_t alive() const { return backend.created() - backend.destroyed(); }
  // A handle made outside the pool: counted by the backend, unknown to the pool.
  Owner outside(int device = -1) {
    return backend.adopt(backend.create(Backend::kDefaultOptions, 0), device);
  }

  // The message of the CapReachedError `call` throws, checked for what every such error names.
  template <class Call>
  std::string cap_error_of(Call &&call, std::size_t held) {
    try {
      call();
    } catch (const CapReachedError &error) {
      EXPECT_EQ(error.device(), 0);
      EXPECT_EQ(error.cap(), kCap);
      EXPECT_EQ(error.held(), held);
      const std::string what = error.what();
      EXPECT_NE(what.find("device 0"), std::string::npos) << what;
      EXPECT_NE(what.find("cap of 4"), std::string::npos) << what;
      EXPECT_NE(what.find(std::to_string(held) + " held in this process"), std::string::npos) << what;
      return what;
    }
    ADD_FAILURE() << "no CapReachedError";
    return {};
  }
};
TYPED_TEST_SUITE(PoolCap, Configs, ConfigName);

// The pattern that passed the cap before: handles got and held count, so the fifth Get waits (and
// GetWithin gives up), and after they are put back, leases find the same four.
TYPED_TEST(PoolCap, HandlesGotCountUntilPutBack) {
  std::vector<typename TestFixture::Owner> got;
  for (std::size_t i = 0; i < TestFixture::kCap; ++i) got.push_back(this->pool.Get(0));
  const std::string what =
      this->cap_error_of([&] { (void)this->pool.GetWithin(nanoseconds(0), 0); }, TestFixture::kCap);
  EXPECT_NE(what.find("GetWithin found no"), std::string::npos) << what;
  EXPECT_EQ(this->backend.created(), TestFixture::kCap);
  for (auto &owner : got) this->pool.Put(std::move(owner));
  std::vector<typename TestFixture::Pool::unique_lease> leases;
  for (std::size_t i = 0; i < TestFixture::kCap; ++i)
    leases.push_back(this->pool.LeaseWithin(nanoseconds(0), 0));
  this->cap_error_of([&] { (void)this->pool.LeaseWithin(nanoseconds(0), 0); }, TestFixture::kCap);
  EXPECT_EQ(this->backend.created(), TestFixture::kCap);
  // Gets and leases mixed, in every order: never more than the cap alive.
  leases.pop_back();
  got.clear();
  got.push_back(this->pool.Get(0));
  this->cap_error_of([&] { (void)this->pool.GetWithin(nanoseconds(0), 0); }, TestFixture::kCap);
  EXPECT_LE(this->alive(), TestFixture::kCap);
  this->pool.Put(std::move(got.back()));
}

// A handle from outside takes a place: accepted below the cap (and found by the next Get), refused
// at the cap, bare or recording its device, with the caller still owning it.
TYPED_TEST(PoolCap, AForeignPutTakesAPlaceAndIsRefusedAtTheCap) {
  std::vector<typename TestFixture::Pool::unique_lease> leases;
  for (std::size_t i = 0; i + 1 < TestFixture::kCap; ++i) leases.push_back(this->pool.Lease(0));
  auto foreign = this->outside(0);
  const auto token = foreign.get();
  this->pool.PutForeign(std::move(foreign));
  leases.push_back(this->pool.LeaseWithin(nanoseconds(0), 0));
  EXPECT_EQ(leases.back().get(), token) << "the foreign handle is the one idle";
  // At the cap now: a foreign Put of either kind is refused, and the caller keeps its handle.
  for (const int recorded : {0, -1}) {
    auto refused = this->outside(recorded);
    const auto kept = refused.get();
    const std::string what = this->cap_error_of(
        [&] {
          if (recorded == -1)
            this->pool.Put(std::move(refused));  // a bare handle is foreign by what it records
          else
            this->pool.PutForeign(std::move(refused));
        },
        TestFixture::kCap);
    EXPECT_NE(what.find("the caller still owns"), std::string::npos) << what;
    EXPECT_EQ(refused.get(), kept) << "a refused Put took the handle";
  }
  this->cap_error_of([&] { (void)this->pool.GetWithin(nanoseconds(0), 0); }, TestFixture::kCap);
  EXPECT_LE(this->alive() - 2, TestFixture::kCap) << "the pool's handles (the test holds 2 refused)";
}

// A lease's release() takes its handle out of the count: the pool may create another, and the
// released handle comes back only as a foreign one, refused at the cap.
TYPED_TEST(PoolCap, AReleasedHandleLeavesTheCountAndComesBackForeign) {
  std::vector<typename TestFixture::Pool::unique_lease> leases;
  for (std::size_t i = 0; i < TestFixture::kCap; ++i) leases.push_back(this->pool.Lease(0));
  auto released = leases.back().release();
  leases.pop_back();
  leases.push_back(this->pool.LeaseWithin(nanoseconds(0), 0));  // the released one's place
  EXPECT_EQ(this->backend.created(), TestFixture::kCap + 1);
  this->cap_error_of([&] { this->pool.PutForeign(std::move(released)); }, TestFixture::kCap);
  EXPECT_TRUE(static_cast<bool>(released));
  // A lease that ends leaves its handle in the pool, counted; destroying it frees the place.
  leases.pop_back();
  // (held: in this thread's cache, the idle handle counts as held, out of other threads' reach)
  this->cap_error_of([&] { this->pool.PutForeign(std::move(released)); },
                     test::caches_on<typename TypeParam::Policy>() ? TestFixture::kCap : TestFixture::kCap - 1);
  this->pool.Purge();
  this->pool.PutForeign(std::move(released));
  EXPECT_FALSE(static_cast<bool>(released));
}

// A foreign Put that a checked pool refuses as a double Put gives its place back: the cap still
// lets the pool have kCap handles (here: the one put back, and kCap - 1 made).
TYPED_TEST(PoolCap, AForeignDoublePutGivesItsPlaceBack) {
  typename TestFixture::Pool checked{this->backend, TypeParam::Backend::kDefaultOptions, kUnlimitedIdle,
                                     Checks::kOn, TestFixture::kCap};
  auto released = checked.Lease(0).release();  // out of the count
  auto duplicate = this->backend.adopt(released.get(), 0);
  checked.PutForeign(std::move(released));
  EXPECT_THROW(checked.PutForeign(std::move(duplicate)), DoublePutError);
  std::vector<typename TestFixture::Pool::unique_lease> leases;
  for (std::size_t i = 0; i < TestFixture::kCap; ++i)
    leases.push_back(checked.LeaseWithin(nanoseconds(0), 0));
  EXPECT_EQ(this->backend.created(), TestFixture::kCap);
}

TYPED_TEST(PoolCap, ANegativePatienceIsRefusedBeforeAnythingIsTaken) {
  EXPECT_THROW((void)this->pool.GetWithin(nanoseconds(-1), 0), std::invalid_argument);
  EXPECT_THROW((void)this->pool.LeaseWithin(nanoseconds(-1), 0), std::invalid_argument);
  EXPECT_EQ(this->backend.created(), 0u);
}

// Without a cap the bounded forms are Get and Lease, and a foreign Put is a Put.
TYPED_TEST(PoolCap, WithoutACapTheBoundedFormsNeverWait) {
  typename TestFixture::Pool uncapped(this->backend);
  std::vector<typename TestFixture::Owner> got;
  for (int i = 0; i < 10; ++i) got.push_back(uncapped.GetWithin(nanoseconds(0), 0));
  for (int i = 0; i < 10; ++i) uncapped.PutForeign(this->outside(0));
  for (auto &owner : got) uncapped.Put(std::move(owner));
  EXPECT_EQ(uncapped.stats().total().idle, 20u);
}

}  // namespace
}  // namespace evpool
