// evpool example scheduler: TaskKernel, a task's GPU work: one thread that spins for the task's
// duration, and, if asked, checks that the task runs after its inputs and only once.
//
// Design rationale
// ----------------
// The benchmark needs work of a controlled length, and the tests need the GPU itself to say
// whether the executor ordered the work right. One kernel does both. It is written in PTX and
// loaded at run time (cudaLibraryLoadData, cudaLibraryGetKernel), as the project's test kernels
// are (test/support/ptx_kernels.h): the build needs no nvcc, and the driver compiles the PTX for
// whatever GPU runs it.
//
//   task(ns, runs, id, inputs, count, violations)
//     if runs is null: spins on %globaltimer for ns nanoseconds, and nothing else;
//     otherwise, first, for each of the `count` input ids at `inputs`, counts a violation if
//     runs[input] is still 0 (the input's kernel has not finished: this one began too early);
//     then spins; then adds 1 to runs[id] (a task that runs twice shows as 2).
// An input's kernel adds to its count last, and a kernel that begins after it has ended sees
// the count: kernel boundaries make a finished kernel's writes visible to the work ordered after
// it. The reads are volatile (relaxed at system scope), so that no cached copy hides a count.
//
// A checked kernel costs the same launch as a plain one (the arguments are 40 bytes instead of
// 8); the benchmark passes no graph and gets the plain spin.
//
// The PTX targets sm_52 with ISA 8.0 (CUDA 12.0), which any CUDA 12 or 13 driver compiles for its
// GPUs; `ptxas -arch=sm_90` assembles it.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "dag.h"
#include "evpool/cuda_error.h"

namespace evpool::example {

inline constexpr char kTaskKernelPtx[] = R"ptx(
.version 8.0
.target sm_52
.address_size 64

.visible .entry task(
	.param .u64 task_param_ns,
	.param .u64 task_param_runs,
	.param .u32 task_param_id,
	.param .u64 task_param_inputs,
	.param .u32 task_param_count,
	.param .u64 task_param_violations)
{
	.reg .pred %p<4>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<16>;

	ld.param.u64 %rd1, [task_param_ns];
	ld.param.u64 %rd2, [task_param_runs];
	setp.ne.u64 %p0, %rd2, 0;
	@!%p0 bra $L_spin;
	cvta.to.global.u64 %rd2, %rd2;
	ld.param.u64 %rd3, [task_param_inputs];
	cvta.to.global.u64 %rd3, %rd3;
	ld.param.u32 %r1, [task_param_count];
	ld.param.u64 %rd4, [task_param_violations];
	cvta.to.global.u64 %rd4, %rd4;
	mov.u32 %r2, 0;
$L_check:
	setp.ge.u32 %p2, %r2, %r1;
	@%p2 bra $L_spin;
	mul.wide.u32 %rd5, %r2, 4;
	add.s64 %rd6, %rd3, %rd5;
	ld.global.u32 %r3, [%rd6];
	mul.wide.u32 %rd7, %r3, 4;
	add.s64 %rd8, %rd2, %rd7;
	ld.volatile.global.u32 %r4, [%rd8];
	setp.ne.u32 %p3, %r4, 0;
	@%p3 bra $L_next;
	atom.global.add.u32 %r5, [%rd4], 1;
$L_next:
	add.u32 %r2, %r2, 1;
	bra $L_check;

$L_spin:
	mov.u64 %rd9, %globaltimer;
$L_wait:
	mov.u64 %rd10, %globaltimer;
	sub.s64 %rd11, %rd10, %rd9;
	setp.lt.u64 %p1, %rd11, %rd1;
	@%p1 bra $L_wait;

	@!%p0 bra $L_done;
	ld.param.u32 %r6, [task_param_id];
	mul.wide.u32 %rd12, %r6, 4;
	add.s64 %rd13, %rd2, %rd12;
	atom.global.add.u32 %r7, [%rd13], 1;
$L_done:
	ret;
}
)ptx";

/// The kernel, loaded once per object on the calling thread's current device; launches run on
/// the current device of the launching thread, so streams must be of that device. Thread-safe:
/// launch() may be called from any number of threads. Not copyable: the driver may write the JIT
/// log late. Unload (the destructor) only once the launched work has ended.
class TaskKernel {
 public:
  /// What a checked run saw (read_check()).
  struct Check {
    std::vector<std::uint32_t> runs;  // per task: how many times its kernel ran
    std::uint32_t violations = 0;     // inputs found unfinished when a kernel began
  };

  /// Loads the kernel. With `checked`, also copies the graph's inputs to the device and makes
  /// counters for read_check(); the graph must not change afterwards. Throws std::runtime_error
  /// naming the step that failed and the JIT log, and CUDAError where the device memory cannot be
  /// had; nothing is left allocated.
  explicit TaskKernel(const Dag *checked = nullptr) {
    cudaError_t error =
        cudaLibraryLoadData(&library_, kTaskKernelPtx, jit_options_, jit_values_, 2, nullptr, nullptr, 0);
    if (error != cudaSuccess)
      throw std::runtime_error(std::string("TaskKernel: cudaLibraryLoadData: ") + cudaGetErrorName(error) +
                               "; JIT log: " + log_);
    error = cudaLibraryGetKernel(&kernel_, library_, "task");
    if (error != cudaSuccess) {
      (void)cudaLibraryUnload(library_);
      throw std::runtime_error(std::string("TaskKernel: cudaLibraryGetKernel(task): ") + cudaGetErrorName(error));
    }
    if (checked == nullptr) return;
    try {
      check_memory(*checked);
    } catch (...) {
      release();
      throw;
    }
  }
  TaskKernel(const TaskKernel &) = delete;
  TaskKernel &operator=(const TaskKernel &) = delete;
  ~TaskKernel() { release(); }

  /// Enqueues task `task`'s kernel, of `duration`, on `stream`. Returns what cudaLaunchKernel
  /// returns. A checked kernel's `task` must be of its graph.
  cudaError_t launch(cudaStream_t stream, TaskId task, std::chrono::nanoseconds duration) const noexcept {
    unsigned long long ns = duration.count() < 0 ? 0ull : static_cast<unsigned long long>(duration.count());
    std::uint32_t *inputs = runs_ == nullptr ? nullptr : inputs_ + offsets_[task];
    std::uint32_t id = task, count = runs_ == nullptr ? 0 : offsets_[task + 1] - offsets_[task];
    std::uint32_t *runs = runs_, *violations = violations_;
    void *args[] = {&ns, &runs, &id, &inputs, &count, &violations};
    return cudaLaunchKernel(reinterpret_cast<const void *>(kernel_), dim3(1), dim3(1), args, 0, stream);
  }

  bool checked() const noexcept { return runs_ != nullptr; }

  /// The counters of a checked kernel, once its work is done (the caller synchronises: the tasks'
  /// non-blocking streams do not order the copy on the legacy default stream after them). Throws
  /// std::logic_error for an unchecked kernel, CUDAError.
  Check read_check() const {
    if (runs_ == nullptr)
      throw std::logic_error("TaskKernel::read_check: the kernel was made without a graph");
    Check check;
    check.runs.resize(offsets_.size() - 1);
    throw_on(cudaMemcpy(check.runs.data(), runs_, check.runs.size() * sizeof(std::uint32_t), cudaMemcpyDeviceToHost),
             "cudaMemcpy");
    throw_on(cudaMemcpy(&check.violations, violations_, sizeof(std::uint32_t), cudaMemcpyDeviceToHost),
             "cudaMemcpy");
    return check;
  }

  /// Sets the counters of a checked kernel back to 0, for another run, and waits until that is
  /// done. Throws CUDAError.
  void reset_check() {
    if (runs_ == nullptr) return;
    throw_on(cudaMemset(runs_, 0, (offsets_.size() - 1) * sizeof(std::uint32_t)), "cudaMemset");
    throw_on(cudaMemset(violations_, 0, sizeof(std::uint32_t)), "cudaMemset");
    // cudaMemset and cudaMemcpy to the device may return before they are done, on the legacy
    // default stream, which the tasks' non-blocking streams do not wait for.
    throw_on(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

 private:
  static void throw_on(cudaError_t error, const char *call) {
    if (error != cudaSuccess) throw CUDAError(error, call);
  }

  void check_memory(const Dag &dag) {
    std::vector<std::uint32_t> inputs;
    offsets_.reserve(dag.size() + 1);
    offsets_.push_back(0);
    for (TaskId task = 0; task < dag.size(); ++task) {
      for (const TaskId input : dag.inputs(task)) inputs.push_back(input);
      offsets_.push_back(static_cast<std::uint32_t>(inputs.size()));
    }
    throw_on(cudaMalloc(reinterpret_cast<void **>(&inputs_), std::max<std::size_t>(1, inputs.size()) * 4),
             "cudaMalloc");
    throw_on(cudaMalloc(reinterpret_cast<void **>(&runs_), std::max<std::size_t>(1, dag.size()) * 4), "cudaMalloc");
    throw_on(cudaMalloc(reinterpret_cast<void **>(&violations_), 4), "cudaMalloc");
    throw_on(cudaMemcpy(inputs_, inputs.data(), inputs.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    reset_check();
  }

  void release() noexcept {
    for (std::uint32_t *memory : {inputs_, runs_, violations_})
      if (memory != nullptr) (void)cudaFree(memory);
    inputs_ = runs_ = violations_ = nullptr;
    if (library_ != nullptr) (void)cudaLibraryUnload(library_);  // fails after a sticky error: ignored
    library_ = nullptr;
  }

  char log_[4096] = {};
  cudaJitOption jit_options_[2] = {cudaJitErrorLogBuffer, cudaJitErrorLogBufferSizeBytes};
  void *jit_values_[2] = {log_, reinterpret_cast<void *>(static_cast<std::uintptr_t>(sizeof(log_)))};
  cudaLibrary_t library_ = nullptr;
  cudaKernel_t kernel_ = nullptr;
  // Checked only: each task's inputs, one after another, where offsets_[task] says.
  std::vector<std::uint32_t> offsets_;
  std::uint32_t *inputs_ = nullptr;
  std::uint32_t *runs_ = nullptr;
  std::uint32_t *violations_ = nullptr;
};

}  // namespace evpool::example
