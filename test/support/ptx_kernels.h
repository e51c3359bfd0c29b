// Kernels for GPU tests, written in PTX and loaded at run time through the CUDA runtime's library
// API (cudaLibraryLoadData, cudaLibraryGetKernel), so that the tests need no nvcc to build: the
// driver compiles the PTX for whatever GPU runs them.
//   spin(ns)  one thread busy-waits on %globaltimer until `ns` nanoseconds have passed: work of a
//             chosen length on a stream.
//   fault()   executes `trap;`: the context gets a sticky error (cudaErrorLaunchFailure or the
//             like), and every later call in the process fails.
// The PTX targets sm_52 with ISA 8.0 (CUDA 12.0), which any CUDA 12 or 13 driver compiles for
// its GPUs; `ptxas -arch=sm_90` assembles it.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "evpool/cuda_error.h"

namespace evpool::testing_support {

inline constexpr char kTestKernelsPtx[] = R"ptx(
.version 8.0
.target sm_52
.address_size 64

.visible .entry spin(.param .u64 spin_param_ns)
{
	.reg .pred %p<2>;
	.reg .b64 %rd<5>;
	ld.param.u64 %rd1, [spin_param_ns];
	mov.u64 %rd2, %globaltimer;
$L_spin:
	mov.u64 %rd3, %globaltimer;
	sub.s64 %rd4, %rd3, %rd2;
	setp.lt.u64 %p1, %rd4, %rd1;
	@%p1 bra $L_spin;
	ret;
}

.visible .entry fault()
{
	trap;
	ret;
}
)ptx";

/// The kernels above, loaded once per object. Launches run one thread on the calling thread's
/// current device, so `stream` must be of that device. Unload (the destructor) only once the
/// launched work has ended. Not copyable, not movable: the driver may write the JIT log late.
class PtxKernels {
 public:
  PtxKernels() {
    error_ = cudaLibraryLoadData(&library_, kTestKernelsPtx, jit_options_, jit_values_, 2, nullptr, nullptr, 0);
    const char *step = "cudaLibraryLoadData";
    if (error_ == cudaSuccess) {
      step = "cudaLibraryGetKernel(spin)";
      error_ = cudaLibraryGetKernel(&spin_, library_, "spin");
    }
    if (error_ == cudaSuccess) {
      step = "cudaLibraryGetKernel(fault)";
      error_ = cudaLibraryGetKernel(&fault_, library_, "fault");
    }
    if (error_ != cudaSuccess) {
      (void)cudaGetLastError();
      why_ = std::string(step) + ": " + cudaGetErrorName(error_) + ": " + evpool::describe_cuda_error(error_);
      if (log_[0] != '\0') why_ += std::string("; JIT log: ") + log_;
    }
  }
  PtxKernels(const PtxKernels &) = delete;
  PtxKernels &operator=(const PtxKernels &) = delete;
  ~PtxKernels() {
    if (library_ != nullptr) (void)cudaLibraryUnload(library_);  // fails after a sticky error: ignored
  }

  /// cudaSuccess once both kernels are loaded; otherwise why() says what failed.
  cudaError_t error() const noexcept { return error_; }
  const std::string &why() const noexcept { return why_; }

  /// Enqueues a spin of `duration` on `stream`.
  cudaError_t spin(cudaStream_t stream, std::chrono::nanoseconds duration) const {
    unsigned long long ns = duration.count() < 0 ? 0ull : static_cast<unsigned long long>(duration.count());
    void *args[] = {&ns};
    return cudaLaunchKernel(reinterpret_cast<const void *>(spin_), dim3(1), dim3(1), args, 0, stream);
  }

  /// Enqueues the trap on `stream`: once it runs, the context is unusable.
  cudaError_t fault(cudaStream_t stream) const {
    return cudaLaunchKernel(reinterpret_cast<const void *>(fault_), dim3(1), dim3(1), nullptr, 0, stream);
  }

 private:
  char log_[4096] = {};
  cudaJitOption jit_options_[2] = {cudaJitErrorLogBuffer, cudaJitErrorLogBufferSizeBytes};
  void *jit_values_[2] = {log_, reinterpret_cast<void *>(static_cast<std::uintptr_t>(sizeof(log_)))};
  cudaLibrary_t library_ = nullptr;
  cudaKernel_t spin_ = nullptr;
  cudaKernel_t fault_ = nullptr;
  cudaError_t error_ = cudaSuccess;
  std::string why_;
};

}  // namespace evpool::testing_support
