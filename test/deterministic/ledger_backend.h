// A host backend that keeps a ledger of every event it creates: its device, and how many times it
// was destroyed, whether by the pool (destroy) or by the owner of an event (the event's
// destructor). HostBackend only counts creates and destroys; the ledger names the event, so a
// history can be checked for what a pool must never do, whatever its internals:
// - hand out an event that was already destroyed (what an ABA on a stack head does);
// - destroy an event twice, or one it never created;
// - forget an event (never destroyed once the pool and every holder are gone);
// - keep more idle events than its limit (idle = created - destroyed - held, per device).
// Tokens are 1, 2, 3, ... in order of creation (0: no event). Copies share one ledger.
//
// Not thread-safe: it is meant for runs of the DeterministicScheduler, where one thread runs at a
// time and the scheduler's hand-offs order everything, and for single-threaded code.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

namespace evpool::testing_support {

class LedgerBackend {
 public:
  using handle_type = std::uint64_t;
  using options_type = unsigned;
  static constexpr unsigned kDefaultOptions = 0;

  class Ledger {
   public:
    explicit Ledger(int devices) : live_on_(static_cast<std::size_t>(devices), 0) {}

    handle_type create(int device) {
      device_of_.push_back(device);
      times_destroyed_.push_back(0);
      ++live_on_.at(static_cast<std::size_t>(device));
      return device_of_.size();
    }
    void destroy(handle_type token) noexcept {
      if (!known(token)) {
        ++unknown_destroyed_;
        return;
      }
      if (times_destroyed_[token - 1]++ == 0) --live_on_[static_cast<std::size_t>(device_of(token))];
    }

    bool known(handle_type token) const noexcept { return token >= 1 && token <= device_of_.size(); }
    int device_of(handle_type token) const { return device_of_.at(token - 1); }
    bool destroyed(handle_type token) const { return times_destroyed_.at(token - 1) != 0; }
    std::uint64_t created() const noexcept { return device_of_.size(); }
    /// Events of `device` created and not yet destroyed: idle in the pool, or held.
    std::int64_t live_on(int device) const { return live_on_.at(static_cast<std::size_t>(device)); }
    /// Events destroyed more than once, never destroyed, and destroys of tokens never created.
    std::uint64_t destroyed_twice() const {
      return count_if_destroyed([](int n) { return n > 1; });
    }
    std::uint64_t never_destroyed() const {
      return count_if_destroyed([](int n) { return n == 0; });
    }
    std::uint64_t unknown_destroyed() const noexcept { return unknown_destroyed_; }

   private:
    template <class Predicate>
    std::uint64_t count_if_destroyed(Predicate predicate) const {
      std::uint64_t count = 0;
      for (int times : times_destroyed_) count += predicate(times) ? 1 : 0;
      return count;
    }

    std::vector<int> device_of_;         // [token - 1]
    std::vector<int> times_destroyed_;   // [token - 1]
    std::vector<std::int64_t> live_on_;  // [device]
    std::uint64_t unknown_destroyed_ = 0;
  };

  /// The move-only owner of one token; its destructor records the destroy in the ledger.
  class Event {
   public:
    Event() noexcept = default;
    Event(Event &&other) noexcept
        : ledger_(other.ledger_), token_(std::exchange(other.token_, 0)),
          device_(std::exchange(other.device_, -1)) {}
    Event &operator=(Event &&other) noexcept {
      if (this != &other) {
        reset();
        ledger_ = other.ledger_;
        token_ = std::exchange(other.token_, 0);
        device_ = std::exchange(other.device_, -1);
      }
      return *this;
    }
    ~Event() { reset(); }

    handle_type get() const noexcept { return token_; }
    int device_id() const noexcept { return device_; }
    explicit operator bool() const noexcept { return token_ != 0; }
    handle_type release() noexcept {
      device_ = -1;
      return std::exchange(token_, 0);
    }
    void reset() noexcept {
      if (token_ != 0) ledger_->destroy(token_);
      token_ = 0;
      device_ = -1;
    }

   private:
    friend class LedgerBackend;
    Event(Ledger *ledger, handle_type token, int device) noexcept
        : ledger_(ledger), token_(token), device_(device) {}

    Ledger *ledger_ = nullptr;
    handle_type token_ = 0;
    int device_ = -1;
  };
  using owner_type = Event;

  explicit LedgerBackend(int device_count = 1)
      : device_count_(device_count), ledger_(std::make_shared<Ledger>(device_count)) {}

  void validate_options(unsigned) const noexcept {}
  handle_type create(unsigned /*flags*/, int device) {
    if (device < 0 || device >= device_count_) throw std::out_of_range("LedgerBackend::create");
    return ledger_->create(device);
  }
  void destroy(handle_type token) noexcept { ledger_->destroy(token); }
  Event adopt(handle_type token, int device) noexcept { return Event(ledger_.get(), token, device); }
  int device_count() const noexcept { return device_count_; }
  /// Always 0: the scenarios name their devices.
  int current_device() const noexcept { return 0; }

  const Ledger &ledger() const noexcept { return *ledger_; }

 private:
  int device_count_;
  std::shared_ptr<Ledger> ledger_;
};

/// LedgerBackend with the stream paths of the core: every other query of a handle reads busy (the
/// count is the backend's, a plain one: the scheduled threads run one at a time), and a bare
/// handle tells its device from the ledger.
class LedgerStreamBackend : public LedgerBackend {
 public:
  using LedgerBackend::LedgerBackend;
  bool has_pending_work(handle_type) const noexcept { return (++*queries_ & 1) != 0; }
  int query_device(handle_type token) const noexcept {
    return ledger().known(token) ? ledger().device_of(token) : -1;
  }

 private:
  std::shared_ptr<std::uint64_t> queries_ = std::make_shared<std::uint64_t>(0);
};

}  // namespace evpool::testing_support
