// Orders two streams through evpool's process-wide pool: what a scheduler does on every
// cross-stream dependency. Without a GPU it reports CUDA's error and exits cleanly.
#include <evpool/cuda_error.h>
#include <evpool/stream_wait.h>

#include <cstdio>

int main() {
  try {
    cudaStream_t producer, consumer;
    if (cudaStreamCreate(&producer) != cudaSuccess || cudaStreamCreate(&consumer) != cudaSuccess)
      throw evpool::CUDAError(cudaGetLastError(), "cudaStreamCreate");
    for (int step = 0; step < 1000; ++step) evpool::wait(consumer, producer);
    cudaStreamSynchronize(consumer);
    std::printf("ordered 1000 steps through evpool\n");
  } catch (const evpool::CUDAError &error) {
    std::printf("no usable GPU here: %s\n", error.what());
  }
  return 0;
}
