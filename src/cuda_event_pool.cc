#include "evpool/cuda_event_pool.h"

namespace evpool {

template class BasicEventPool<CUDABackend>;

CUDAEventPool &CUDAEventPool::instance() {
  static CUDAEventPool *const pool = new CUDAEventPool();
  return *pool;
}

}  // namespace evpool
