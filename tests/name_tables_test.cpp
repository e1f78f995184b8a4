// Every enum that has names has one table (core::Names), and every reader
// and writer goes through it: each table names each value once, its values
// are the enum's 0..N-1 (no enumerator skipped in between), every name reads
// back as its value, and the to_string / parse functions of each library
// agree with the table.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <type_traits>

#include "core/names.hpp"
#include "core/stack_kernels.hpp"
#include "cost/nccl.hpp"
#include "explore/search.hpp"
#include "models/step_graph.hpp"
#include "plan/plan.hpp"
#include "runtime/host/host_backend.hpp"
#include "schedule/names.hpp"
#include "stacks/stack_spec.hpp"
#include "topologies/cluster_spec.hpp"
#include "validation/cases.hpp"

namespace hzp {
namespace {

// The table's own properties, and that `to_string` and `parse` (when given)
// are the table's.
template <class E, std::size_t N, class ToString, class Parse>
void expect_table(const core::Names<E, N>& table, const std::string& label, ToString to_string, Parse parse) {
  std::set<std::string_view> names;
  std::set<int> values;
  for (const auto& [v, n] : table) {
    EXPECT_FALSE(n.empty()) << label;
    EXPECT_TRUE(names.insert(n).second) << label << ": \"" << n << "\" twice";
    EXPECT_TRUE(values.insert(static_cast<int>(v)).second) << label << ": value " << static_cast<int>(v) << " twice";
    EXPECT_EQ(core::name_of(table, v), n) << label;
    EXPECT_EQ(core::parse_name(table, n), v) << label << ": " << n;
    EXPECT_EQ(std::string_view(to_string(v)), n) << label;
    if constexpr (!std::is_same_v<Parse, std::nullptr_t>) {
      EXPECT_EQ(parse(n), v) << label << ": " << n;
    }
  }
  ASSERT_EQ(values.size(), N) << label;
  EXPECT_EQ(*values.begin(), 0) << label;
  EXPECT_EQ(*values.rbegin(), static_cast<int>(N) - 1) << label << ": a value between is missing from the table";
  EXPECT_EQ(core::parse_name(table, "no such name"), std::nullopt) << label;
  EXPECT_EQ(core::names(table).size(), N) << label;
}

template <class E, std::size_t N>
void expect_table(const core::Names<E, N>& table, const std::string& label) {
  expect_table(
      table, label, [&](E v) { return core::name_of(table, v); }, nullptr);
}

TEST(NameTables, EveryEnumRoundTripsThroughItsOneTable) {
  // The Schedule (reader, writer, and what the CLI prints).
  expect_table(
      core::kDtype, "Dtype", [](auto v) { return core::to_string(v); }, nullptr);
  expect_table(
      core::kGroupKind, "GroupKind", [](auto v) { return core::to_string(v); }, nullptr);
  expect_table(
      core::kOpKind, "OpKind", [](auto v) { return core::to_string(v); }, nullptr);
  expect_table(
      core::kComputeKind, "ComputeKind", [](auto v) { return core::to_string(v); }, nullptr);
  expect_table(
      core::kCollectiveKind, "CollectiveKind", [](auto v) { return core::to_string(v); }, nullptr);
  expect_table(
      core::kStreamKind, "StreamKind", [](auto v) { return core::to_string(v); }, nullptr);
  expect_table(
      core::kOpRole, "OpRole", [](auto v) { return core::to_string(v); }, nullptr);
  expect_table(
      core::kParamClass, "ParamClass", [](auto v) { return core::to_string(v); }, nullptr);
  expect_table(
      core::kBufferClass, "BufferClass", [](auto v) { return core::to_string(v); }, nullptr);
  // Stack files and device profiles.
  expect_table(
      core::kAttentionKernels, "AttentionKernel", [](auto v) { return core::to_string(v); },
      [](std::string_view s) { return core::parse_attention_kernel(s); });
  expect_table(core::kSelectivePolicies, "SelectivePolicy");
  expect_table(core::kUnfusedLosses, "UnfusedLoss");
  expect_table(core::kFp8SavedInputs, "Fp8SavedInputs");
  expect_table(
      stacks::kGranularities, "Granularity", [](auto v) { return stacks::to_string(v); }, nullptr);
  expect_table(stacks::kStepReductions, "StepReduction");
  expect_table(stacks::kRegathers, "Regather");
  expect_table(stacks::kAllocators, "Allocator");
  // Model and cluster files.
  expect_table(models::kFfnActivations, "FfnActivation");
  expect_table(models::kNormKinds, "NormKind");
  expect_table(models::kPositionEmbeddings, "PositionEmbedding");
  expect_table(topologies::kScaleUpKinds, "ScaleUpKind");
  // Plan options (flags, plan files, printed plans).
  expect_table(
      plan::kStrategies, "Strategy", [](auto v) { return plan::to_string(v); },
      [](std::string_view s) { return plan::parse_strategy(s); });
  expect_table(
      plan::kPipelineSchedules, "PipelineSchedule", [](auto v) { return plan::to_string(v); },
      [](std::string_view s) { return plan::parse_pipeline_schedule(s); });
  expect_table(
      models::kRecomputes, "Recompute", [](auto v) { return plan::to_string(v); },
      [](std::string_view s) { return plan::parse_recompute(s); });
  expect_table(
      models::kPrecisions, "Precision", [](auto v) { return plan::to_string(v); },
      [](std::string_view s) { return plan::parse_precision(s); });
  // Plan search, validation cases, the NCCL model, the runtime's host clock.
  expect_table(
      explore::kObjectives, "Objective", [](auto v) { return explore::to_string(v); },
      [](std::string_view s) { return explore::parse_objective(s); });
  expect_table(
      validation::kQuantities, "Quantity", [](auto v) { return validation::to_string(v); }, nullptr);
  expect_table(
      cost::kNcclAlgorithmNames, "NcclAlgorithm", [](auto v) { return cost::to_string(v); }, nullptr);
  expect_table(
      cost::kNcclProtocolNames, "NcclProtocol", [](auto v) { return cost::to_string(v); }, nullptr);
  expect_table(
      runtime::kHostClocks, "HostClock", [](auto v) { return runtime::to_string(v); },
      [](std::string_view s) { return runtime::parse_host_clock(s); });
}

// The scale-up link names are a subset of LinkClass's values (a scale-up
// domain is never the network), each read back as its value.
TEST(NameTables, ScaleUpLinksNameTheirLinkClasses) {
  for (const auto& [v, n] : topologies::kScaleUpLinks) EXPECT_EQ(core::parse_name(topologies::kScaleUpLinks, n), v);
  EXPECT_EQ(core::parse_name(topologies::kScaleUpLinks, "pcie"), topologies::LinkClass::Pci);
  EXPECT_EQ(core::joined_names(topologies::kScaleUpLinks), "nvlink|pcie");
}

// Aliases a reader accepts beside the table: DeepSpeed's "zero3" is fsdp.
TEST(NameTables, AliasesStayWithTheirReader) {
  EXPECT_EQ(plan::parse_strategy("zero3"), plan::Strategy::Fsdp);
  EXPECT_EQ(core::parse_name(plan::kStrategies, "zero3"), std::nullopt);
}

}  // namespace
}  // namespace hzp
