// evpool scheduler model: the stacks the model runs, by name, and whether the GPU measured each.
//
// Design rationale
// ----------------
// The model's stacks are those of bench/scheduler_bench.cc, in its order and with its names, so
// that its tables line up with the measured ones. A design modelled before it is built is marked
// not measured, so that no table mixes a modelled-only figure with a measured one unawares, and no
// ranking counts it; every stack here is built and measured now.
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace evpool::model {

enum class StackKind {
  kEvpool,
  kEvpoolPlanned,
  kEvpoolAhead,
  kDali,
  kDaliExec,
  kPytorch,
  kTensorflow,
  kTensorflowExec,
  kLimit,
  kGraph,
};

struct StackName {
  StackKind kind;
  std::string_view name;
  bool measured;  // bench/scheduler_bench.cc runs it
};

inline constexpr std::array<StackName, 10> kStackNames = {{
    {StackKind::kEvpool, "evpool", true},
    {StackKind::kEvpoolPlanned, "evpool-planned", true},
    {StackKind::kEvpoolAhead, "evpool-ahead", true},
    {StackKind::kDali, "dali", true},
    {StackKind::kDaliExec, "dali-exec", true},
    {StackKind::kPytorch, "pytorch", true},
    {StackKind::kTensorflow, "tensorflow", true},
    {StackKind::kTensorflowExec, "tensorflow-exec", true},
    {StackKind::kLimit, "limit", true},
    {StackKind::kGraph, "graph", true},
}};

inline std::string_view name_of(StackKind kind) {
  for (const StackName &stack : kStackNames)
    if (stack.kind == kind) return stack.name;
  return "?";
}

inline std::optional<StackKind> stack_named(std::string_view name) {
  for (const StackName &stack : kStackNames)
    if (stack.name == name) return stack.kind;
  return std::nullopt;
}

}  // namespace evpool::model
