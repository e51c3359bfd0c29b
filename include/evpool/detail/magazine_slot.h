// evpool: a magazine as a thread cache holds it: its address, its node index and its count side by
// side. Private to the library.
//
// Design rationale
// ----------------
// While a magazine sits in a cache the fast path reads its count and its address from one place,
// the slot, rather than the count through the address: one dependent load fewer per Get and Put.
// The magazine's own `count` is stale meanwhile; load() and write_back_count() move it in and out
// as the magazine enters and leaves the cache (a depot, a purger and the next holder read the
// magazine's own). Counting Gets rides on the same word (the tally below), so that a counted Get
// costs no instruction of its own.
#pragma once

#include <bit>
#include <cstdint>

#include "evpool/detail/node_arena.h"

namespace evpool::detail {

/// A magazine held by a cache (see the rationale). With kCountCalls, the word that holds the count
/// also counts the Gets this slot served, so that counting costs a Get no instruction of its own
/// (take() adds kOneGet - 1: count - 1 and Gets + 1 in one add) and a Put nothing:
///
///   tally:  | Gets served (64 - kCountBits bits) | count (kCountBits bits) |
///
/// The Gets stay with the device's two slots as magazines come and go (handing_gets_to), so the
/// device's cached Gets are loaded.gets() + previous.gets(). Without counting, the tally is the
/// count alone and the code is the plain decrement and increment.
template <class Magazine, bool kCountCalls>
struct MagazineSlot {
  Magazine *magazine = nullptr;
  std::uint32_t index = kNilIndex;
  std::uint64_t tally = 0;

  static constexpr unsigned kCountBits = std::bit_width(Magazine::kCapacity);
  static_assert(kCountBits < 16, "the Gets keep at least 48 bits: they never wrap");
  static constexpr std::uint64_t kCountMask =
      kCountCalls ? (std::uint64_t{1} << kCountBits) - 1 : ~std::uint64_t{0};
  static constexpr std::uint64_t kOneGet = kCountCalls ? std::uint64_t{1} << kCountBits : 0;

  std::uint32_t count() const noexcept { return static_cast<std::uint32_t>(tally & kCountMask); }
  std::uint64_t gets() const noexcept { return kCountCalls ? tally >> kCountBits : 0; }
  bool held() const noexcept { return magazine != nullptr; }
  bool empty() const noexcept { return count() == 0; }
  using Handle = typename Magazine::handle_type;
  [[gnu::always_inline]] Handle take() noexcept {
    tally += kOneGet - 1;
    return magazine->handles[tally & kCountMask];
  }
  /// Undoes the take() just made: the handle is back on top, and the Get uncounted.
  void untake() noexcept { tally -= kOneGet - 1; }
  [[gnu::always_inline]] void put(Handle handle) noexcept {
    magazine->handles[tally++ & kCountMask] = handle;
  }
  void set_count(std::uint32_t count) noexcept { tally = (tally & ~kCountMask) | count; }

  /// The magazine at `index` enters the cache (with no Gets: see handing_gets_to).
  static MagazineSlot load(Magazine &magazine, std::uint32_t index) noexcept {
    return MagazineSlot{&magazine, index, magazine.count};
  }
  /// `next`, about to take this slot's place, with this slot's Gets added to its own.
  MagazineSlot handing_gets_to(MagazineSlot next) const noexcept {
    next.tally += tally & ~kCountMask;
    return next;
  }
  /// The slot gives its magazine up (the caller has dealt with it) and keeps its Gets.
  void clear() noexcept { *this = handing_gets_to(MagazineSlot{}); }
  /// The magazine is about to leave the cache (or be read by whoever empties it): the count
  /// kept here is written back into the magazine, which is returned.
  Magazine &write_back_count() const noexcept {
    magazine->count = count();
    return *magazine;
  }
};

}  // namespace evpool::detail
