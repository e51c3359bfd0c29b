// Leases from a pool of real CUDA events: each lease returns its event under the right device
// when it dies. Without a GPU it reports CUDA's error and exits cleanly.
#include <evpool/cuda_error.h>
#include <evpool/cuda_event_pool.h>

#include <cstdio>

int main() {
  try {
    evpool::CUDAEventPool pool;
    pool.Reserve(0, 8);  // warm up before the first step
    for (int step = 0; step < 100; ++step) {
      auto event = pool.Lease(0);
      auto shared = pool.LeaseShared(0);
      cudaEventRecord(event, nullptr);
      cudaEventRecord(shared, nullptr);
    }
    std::printf("100 steps of leases on %d device(s)\n", pool.device_count());
  } catch (const evpool::CUDAError &error) {
    std::printf("no usable GPU here: %s\n", error.what());
  }
  return 0;
}
