// Code written for DALI's CUDAEventPool, with only the namespace changed. Without a GPU it reports
// CUDA's error and exits cleanly.
#include <evpool/cuda_error.h>
#include <evpool/cuda_event_pool.h>

#include <cstdio>
#include <utility>

using evpool::CUDAEvent;
using evpool::CUDAEventPool;

int main() {
  try {
    int device_id = 0;
    cudaStream_t stream, other_stream;
    cudaStreamCreate(&stream);
    cudaStreamCreate(&other_stream);
    auto &pool = CUDAEventPool::instance();
    CUDAEvent event = pool.Get(device_id);
    cudaEventRecord(event, stream);
    cudaStreamWaitEvent(other_stream, event, 0);
    pool.Put(std::move(event), device_id);
    cudaStreamSynchronize(other_stream);
    std::printf("DALI-style Get/Put works\n");
  } catch (const evpool::CUDAError &error) {
    std::printf("no usable GPU here: %s\n", error.what());
  }
  return 0;
}
