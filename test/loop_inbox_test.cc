// The Python package's LoopInbox (python/src/loop_inbox.h), alone, under threads: filers push
// chains while the loop's side sleeps in poll() on the eventfd and takes. Nothing filed is lost, a
// filer's chains come out in the order it filed them, no wake-up is lost (the consumer never waits
// long while something is filed and not taken), and a closed inbox refuses with the filer keeping
// its chain; and, on one thread, that a request into an empty inbox sets the wake-up and a take
// resets it. In the concurrency program, which the full run builds under ThreadSanitizer: it
// reports a relaxed publication (file()'s release, take()'s acquire: 3 of 3 runs).
#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "../python/src/loop_inbox.h"
#include "support/sanitizers.h"

namespace evpool {
namespace {

struct Node {
  Node *next = nullptr;
  int filer = 0;
  long number = 0;  // the filer's count, from 0
};

using Inbox = python::LoopInbox<Node>;

TEST(LoopInbox, FilersAndASleepingTakerLoseNothingAndNoWakeUp) {
  constexpr int kFilers = 3, kChain = 4;
  const long per_filer = test::kThreadSanitizer ? 20'000 : 200'000;
  Inbox inbox;
  std::atomic<long> filed{0};
  std::vector<std::thread> filers;
  for (int f = 0; f < kFilers; ++f)
    filers.emplace_back([&, f] {
      for (long i = 0; i < per_filer; i += kChain) {
        // A chain newest first, as the poller files a pass's requests of one loop.
        Node *newest = nullptr, *oldest = nullptr;
        for (long n = i; n < i + kChain && n < per_filer; ++n) {
          Node *node = new Node{newest, f, n};
          if (oldest == nullptr) oldest = node;
          newest = node;
        }
        EXPECT_TRUE(inbox.file(newest, oldest)) << "an open inbox refused";
        filed.fetch_add(std::min<long>(kChain, per_filer - i));
      }
    });
  long taken = 0, out_of_order = 0, long_waits_with_work_filed = 0;
  std::vector<long> last(kFilers, -1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (taken < kFilers * per_filer && std::chrono::steady_clock::now() < deadline) {
    pollfd wake{inbox.fd(), POLLIN, 0};
    if (poll(&wake, 1, 2000) == 0 && filed.load() > taken) {
      ++long_waits_with_work_filed;  // 2 s asleep while requests wait: a lost wake-up
      break;
    }
    for (Node *node = inbox.take(); node != nullptr;) {
      Node *next = node->next;
      out_of_order += node->number != last[static_cast<std::size_t>(node->filer)] + 1;
      last[static_cast<std::size_t>(node->filer)] = node->number;
      ++taken;
      delete node;
      node = next;
    }
  }
  for (std::thread &filer : filers) filer.join();
  EXPECT_EQ(long_waits_with_work_filed, 0) << "a wake-up was lost";
  EXPECT_EQ(taken, kFilers * per_filer) << "requests filed and never taken";
  EXPECT_EQ(out_of_order, 0) << "a filer's requests came out in another order";
  for (Node *node = inbox.take(); node != nullptr;) delete std::exchange(node, node->next);
}

bool wakes(const Inbox &inbox) {
  pollfd wake{inbox.fd(), POLLIN, 0};
  return poll(&wake, 1, 0) == 1;
}

TEST(LoopInbox, AFileIntoAnEmptyInboxWakesTheLoopAndATakeResetsTheWake) {
  Inbox inbox;
  Node first{nullptr, 0, 0}, second{nullptr, 0, 1}, third{nullptr, 0, 2};
  EXPECT_FALSE(wakes(inbox));
  ASSERT_TRUE(inbox.file(&first, &first));
  EXPECT_TRUE(wakes(inbox)) << "the first request of an empty inbox woke nothing";
  ASSERT_TRUE(inbox.file(&second, &second));
  EXPECT_EQ(inbox.take(), &first) << "oldest first";
  EXPECT_EQ(first.next, &second);
  EXPECT_FALSE(wakes(inbox)) << "a take leaves the wake-up set";
  ASSERT_TRUE(inbox.file(&third, &third));
  EXPECT_TRUE(wakes(inbox)) << "a request after a take woke nothing";
  EXPECT_EQ(inbox.take(), &third);
}

TEST(LoopInbox, AClosedInboxRefusesAndTheFilerKeepsItsChain) {
  Inbox inbox;
  Node first{nullptr, 0, 0}, second{nullptr, 0, 1};
  ASSERT_TRUE(inbox.file(&first, &first));
  EXPECT_EQ(inbox.close(), &first) << "close() returns what was filed and not taken";
  second.next = nullptr;
  EXPECT_FALSE(inbox.file(&second, &second));
  EXPECT_EQ(second.next, nullptr) << "the refused chain was linked into the closed inbox";
  EXPECT_EQ(inbox.take(), nullptr) << "a closed inbox gives nothing";
  EXPECT_FALSE(inbox.file(&second, &second)) << "it stays closed after a take";
}

}  // namespace
}  // namespace evpool
