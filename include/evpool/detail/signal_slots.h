// evpool: the completion signals' slots: 64-bit words that the GPU writes behind a request's work
// and the poller reads, instead of asking the driver. Private to the library.
//
// Design rationale
// ----------------
// The poller's event queries contend for the driver's locks with every enqueuing thread (about
// 2.8 us a query at 16 threads on the H200 host, docs/completions.md). With a completion signal,
// the requester enqueues, behind its work, a stream memory operation (cuStreamWriteValue64) that
// writes a number into a word of pinned, device-mapped host memory; the poller reads the word, a
// plain load from host memory, and asks the driver nothing while the work runs.
//
// One slot per request, in blocks of 64 per requesting thread. The issue suggested one slot per
// stream FIFO, written with a sequence number that finishes the FIFO up to the value read. But a
// FIFO is the poller's (created when it files a request), while the slot must be known when the
// request is recorded, on the requesting thread: a slot per FIFO needs a map from (thread,
// stream id) to slot on the requester's side too, shared with the poller, and a rule for when a
// stream is gone and its slot may be reused, which only the stream's destruction (invisible to
// the queue) could say. A slot per request lives exactly as long as its request: taken when it is
// made, given back when it is finished, keyed by nothing but the request. Catching up is kept:
// the poller reads the FIFO's newest request's slot, and a landed value finishes the whole FIFO
// (stream_fifos.h), one host read where it was one query.
//
// Blocks. Each thread's channel (request_channel.h) holds one block: 64 words, a free mask and a
// sequence. Only the channel's thread takes slots (fetch_and of its bit: no other thread clears
// bits), and the poller gives them back (fetch_or; the thread too, for a slot whose record made no
// write), so the mask needs no compare-exchange
// loop and the requesters share no line. A thread with 64 requests with signals in flight makes
// its next ones without a signal (the event query, as before) until one is finished. The queue's
// shared channel (several pushers) has no block. A block goes back to the queue's pool when its
// channel does (the thread exited and its requests are done), and the pool keeps it for the next
// channel; the memory is freed with the queue. Bound: 64 slots per thread with a channel at
// once, 512 bytes of pinned memory each, in chunks of kBlocksPerChunk blocks, held until the queue
// is destroyed.
//
// Values. The value written is the block's sequence, increasing with each slot taken and kept by
// the block across channels, never reset. A slot is only reused after its request is finished,
// and a request can be finished without its write having landed (its record failed after the
// write was enqueued, or a sticky error made the event report an error): a stale write that lands
// later carries a lower value than any later request of the block expects, so "landed" is
// `word >= value`, and a value at least a request's own is only written by its own write or by a
// later one, enqueued after the request was finished.
//
// What is not covered: a write still to come when the memory is freed. The queue frees its chunks
// once every request is finished, and a request finished through its event (the write comes
// first), a newer word of its FIFO, or a sticky error (no write lands after it) has no write to
// come. Two do: a request whose event record failed after its write was enqueued, and one whose
// stream began a capture between notify()'s check and the record (the write is then a node of the
// graph, landing whenever the graph is launched). If the queue is destroyed before such a write
// lands, the device writes into freed pinned memory; cudaFreeHost is not documented to wait for it.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <vector>

namespace evpool::detail {

/// One block of signal slots, owned by one requesting thread's channel at a time.
class SignalSlots {
 public:
  static constexpr unsigned kSlots = 64;

  explicit SignalSlots(std::uint64_t *words) noexcept : words_(words) {}

  /// A free slot, or nothing if all 64 are in flight. Only the block's thread. Wait-free.
  std::optional<unsigned> take() noexcept {
    // Acquire (also in the fetch_and): pairs with give_back's release, so the poller's last read
    // of a slot's word happens before this thread enqueues the next write into it.
    const std::uint64_t free = free_.load(std::memory_order_acquire);
    if (free == 0) return std::nullopt;
    const auto slot = static_cast<unsigned>(std::countr_zero(free));
    // Only this thread clears bits, so the bit is still set: no loop.
    free_.fetch_and(~(std::uint64_t{1} << slot), std::memory_order_acquire);
    return slot;
  }

  /// The next value to write: above every value this block handed out before. Only the block's
  /// thread (or the pool, while no thread holds the block).
  std::uint64_t next_value() noexcept { return ++sequence_; }

  /// The slot's word, in pinned host memory that the device can write.
  std::uint64_t *word(unsigned slot) const noexcept { return words_ + slot; }

  /// Gives a slot back once its request is finished (the poller), or at once if no write into it
  /// was enqueued (the block's thread, in the request's submit). Wait-free.
  void give_back(unsigned slot) noexcept {
    // Release: see take().
    free_.fetch_or(std::uint64_t{1} << slot, std::memory_order_release);
  }

  /// A fork() child forgets its parent's requests, and with them their slots.
  void forget_all() noexcept {
    // Relaxed: the fork() child has one thread, and the next take() is its own.
    free_.store(~std::uint64_t{0}, std::memory_order_relaxed);
  }

 private:
  std::uint64_t *const words_;
  std::atomic<std::uint64_t> free_{~std::uint64_t{0}};
  std::uint64_t sequence_ = 0;
};

/// The queue's blocks: made in chunks from memory the backend allocates, handed to channels, kept
/// when they come back, freed with the pool. Thread-safe (a mutex: taken when a thread makes its
/// first request, and when the poller lets a channel go).
class SignalSlotPool {
 public:
  static constexpr std::size_t kBlocksPerChunk = 16;
  static constexpr std::size_t kWordsPerChunk = kBlocksPerChunk * SignalSlots::kSlots;

  SignalSlotPool() = default;
  SignalSlotPool(const SignalSlotPool &) = delete;
  SignalSlotPool &operator=(const SignalSlotPool &) = delete;

  /// A free block, or nullptr if none could be made: `allocate(count)` returns `count` zeroed
  /// words of device-writable memory, or nullptr. Never throws.
  template <class Allocate>
  SignalSlots *take(Allocate &&allocate) noexcept {
    const std::lock_guard lock(mutex_);
    if (free_.empty() && !failed_) {
      try {
        free_.reserve(blocks_.size() + kBlocksPerChunk);
        blocks_.reserve(blocks_.size() + kBlocksPerChunk);
        chunks_.reserve(chunks_.size() + 1);
      } catch (...) {
        return nullptr;
      }
      std::uint64_t *words = allocate(kWordsPerChunk);
      if (words == nullptr) {
        failed_ = true;  // no signals in this queue: asking again per thread would cost as much
        return nullptr;
      }
      chunks_.push_back(words);
      for (std::size_t i = 0; i < kBlocksPerChunk; ++i) {
        auto *block = new (std::nothrow) SignalSlots(words + i * SignalSlots::kSlots);
        if (block == nullptr) break;
        blocks_.emplace_back(block);
        free_.push_back(block);
      }
    }
    if (free_.empty()) return nullptr;
    SignalSlots *block = free_.back();
    free_.pop_back();
    return block;
  }

  /// Takes back a block whose requests are all finished. Never throws (the vector has room).
  void give_back(SignalSlots *block) noexcept {
    if (block == nullptr) return;
    const std::lock_guard lock(mutex_);
    free_.push_back(block);
  }

  /// Frees the memory, through `free(words, count)`: once no request holds a slot.
  template <class Free>
  void release(Free &&free) noexcept {
    const std::lock_guard lock(mutex_);
    for (std::uint64_t *words : chunks_) free(words, kWordsPerChunk);
    chunks_.clear();
    free_.clear();
    blocks_.clear();
  }

  /// A fork() child: every block's slots are free again (their requests are forgotten). The child
  /// has one thread, and a parent's thread may have held the mutex at the fork: it is made anew.
  void forget_all() noexcept {
    new (&mutex_) std::mutex;
    for (const auto &block : blocks_) block->forget_all();
  }

  std::size_t blocks() const noexcept {
    const std::lock_guard lock(mutex_);
    return blocks_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::uint64_t *> chunks_;
  std::vector<std::unique_ptr<SignalSlots>> blocks_;
  std::vector<SignalSlots *> free_;  // capacity for every block: give_back never allocates
  bool failed_ = false;
};

}  // namespace evpool::detail
