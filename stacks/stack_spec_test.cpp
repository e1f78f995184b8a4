#include "stacks/stack_spec.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace hzp::stacks {
namespace {

TEST(StackCatalog, EveryEntryLoadsUnderItsOwnName) {
  const auto names = stack_catalog_names();
  for (const char* want : {"deepspeed-zero", "deepspeed-zeropp", "hzp-async", "megatron-core-te", "megatron-deepspeed",
                           "torch-fsdp1", "torch-fsdp2", "torch-fsdp2-compile"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  for (const auto& n : names) {
    const StackSpec s = load_stack(n);
    EXPECT_EQ(s.name, n);
    EXPECT_FALSE(s.source.empty()) << n;
  }
}

TEST(StackCatalog, DefaultStackIsFusedAndAsynchronous) {
  const StackSpec& s = default_stack()->spec;
  EXPECT_EQ(s.name, kDefaultStack);
  EXPECT_TRUE(s.overlap.background_threads);
  // The defaults of core::NonGemmKernels: one kernel per op.
  EXPECT_EQ(s.ops.norm.forward.kernels, 1);
  EXPECT_EQ(s.ops.norm.forward.bytes_per_element, 4);
  EXPECT_EQ(s.collectives.gather, Granularity::Unit);
}

TEST(StackCatalog, EagerStacksDecomposeTheirOps) {
  const StackSpec s = load_stack("torch-fsdp2");
  // RMSNorm in fp32, kernel by kernel: cast up (2+4), square (4+4), mean (4),
  // scale (4+4), cast back (4+2), weight (2+2) = 36 bytes an element, plus the
  // two per-row kernels (eps, rsqrt): 7 kernels.
  EXPECT_EQ(s.ops.norm.forward.kernels, 7);
  EXPECT_EQ(s.ops.norm.forward.bytes_per_element, 36);
  EXPECT_TRUE(s.ops.repeat_kv);
  EXPECT_TRUE(s.collectives.copy_in && s.collectives.copy_out && s.collectives.grad_copy_in);
  EXPECT_EQ(s.selective, core::SelectivePolicy::EveryOtherMatmul);
  const StackSpec ds = load_stack("deepspeed-zero");
  EXPECT_EQ(ds.collectives.gather, Granularity::Parameter);
  EXPECT_EQ(ds.collectives.reduce, Granularity::Bucket);
}

std::string bad_message(const std::function<void(nlohmann::json&)>& change) {
  auto [text, file] = stack_text("torch-fsdp2");
  nlohmann::json j = nlohmann::json::parse(text);
  change(j);
  try {
    (void)stack_from_json(j.dump(), "mine.json");
  } catch (const core::InputError& e) {
    return e.what();
  }
  return "";
}

TEST(StackSpec, BadInputNamesFileKeyAndExpectation) {
  EXPECT_NE(bad_message([](auto& j) { j["attention"] = "flash9"; }).find("attention"), std::string::npos);
  EXPECT_NE(bad_message([](auto& j) { j["ops"]["norm"]["forward"]["kernels"] = -1; }).find("ops.norm.forward.kernels"),
            std::string::npos);
  EXPECT_NE(bad_message([](auto& j) { j["collectives"]["gather"] = "bucket"; }).find("bucket_MB"), std::string::npos);
  EXPECT_NE(bad_message([](auto& j) { j["extra"] = 1; }).find("mine.json"), std::string::npos);
  EXPECT_NE(bad_message([](auto& j) { j["schema_version"] = 2; }).find("schema_version"), std::string::npos);
  EXPECT_NE(bad_message([](auto& j) {
              j["unfused_loss"] = "apex";
            }).find("unfused_loss: expected one of megatron_vocab_parallel|torch_cross_entropy, got \"apex\""),
            std::string::npos);
  EXPECT_NE(bad_message([](auto& j) {
              j["fp8_saved_inputs"] = "int8";
            }).find("fp8_saved_inputs: expected one of high_precision|fp8, got \"int8\""),
            std::string::npos);
}

// Every knob may be left out and then takes its StackSpec default: a stack
// that names only its kernels (ops) runs with every default, and a new knob
// needs no catalog file to name it.
TEST(StackSpec, EveryKnobLeftOutTakesItsDefault) {
  auto [text, file] = stack_text("torch-fsdp2");
  nlohmann::json full = nlohmann::json::parse(text);
  nlohmann::json j = {
      {"schema_version", full["schema_version"]}, {"name", "minimal"}, {"source", "test"}, {"ops", full["ops"]}};
  const StackSpec s = stack_from_json(j.dump(), "minimal.json");
  const StackSpec d;
  EXPECT_EQ(s.attention, d.attention);
  EXPECT_EQ(s.selective, d.selective);
  EXPECT_EQ(s.unfused_loss, d.unfused_loss);
  EXPECT_EQ(s.fp8_saved_inputs, d.fp8_saved_inputs);
  EXPECT_EQ(s.allocator, d.allocator);
  EXPECT_EQ(s.collectives.gather, Granularity::Unit);
  EXPECT_EQ(s.collectives.reduce, Granularity::Unit);
  EXPECT_FALSE(s.collectives.copy_in || s.collectives.copy_out || s.collectives.grad_copy_in);
  EXPECT_FALSE(s.collectives.int8_weights || s.collectives.int4_gradients);
  EXPECT_EQ(s.collectives.step_reduction, StepReduction::Hierarchical);
  EXPECT_EQ(s.collectives.regather, Regather::AllGather);
  EXPECT_EQ(s.host.kernel_us, 0);
  EXPECT_EQ(s.host.collective_us, 0);
  EXPECT_FALSE(s.overlap.background_threads);
  EXPECT_EQ(s.overlap.max_inflight_gathers, 0);
  EXPECT_EQ(s.overlap.prefetch_MB, 0);
  EXPECT_EQ(s.overlap.tp_gemm_streams, 1);
  EXPECT_FALSE(s.runs.strategies.has_value());
  // A knob inside an object, left out alone, keeps its default too; the
  // object's other keys are read.
  full["overlap"].erase("prefetch_MB");
  full["overlap"]["max_inflight_gathers"] = 3;
  const StackSpec partial = stack_from_json(full.dump(), "partial.json");
  EXPECT_EQ(partial.overlap.prefetch_MB, 0);
  EXPECT_EQ(partial.overlap.max_inflight_gathers, 3);
  // Left-out keys are still strict about what is there.
  j["overlap"] = {{"prefetch_mb", 1}};
  EXPECT_THROW((void)stack_from_json(j.dump(), "typo.json"), core::InputError);
}

// The unfused loss: PyTorch's cross-entropy for the PyTorch stacks, Megatron's
// in-place one where a file does not say (the key is optional).
TEST(StackSpec, UnfusedLossByStack) {
  for (const char* name : {"torch-fsdp1", "torch-fsdp2", "torch-fsdp2-compile"})
    EXPECT_EQ(load_stack(name).unfused_loss, core::UnfusedLoss::TorchCrossEntropy) << name;
  EXPECT_EQ(load_stack("megatron-core-te").unfused_loss, core::UnfusedLoss::MegatronVocabParallel);
  EXPECT_EQ(bad_message([](auto& j) { j.erase("unfused_loss"); }), "");
}

// What FP8 linear layers save of their inputs: FP8 under Transformer Engine
// (Megatron-Core's stack), the high-precision input elsewhere and where a
// file does not say (the key is optional).
TEST(StackSpec, Fp8SavedInputsByStack) {
  EXPECT_EQ(load_stack("megatron-core-te").fp8_saved_inputs, core::Fp8SavedInputs::Fp8);
  for (const char* name : {"torch-fsdp2", "torch-fsdp2-compile", "hzp-async"})
    EXPECT_EQ(load_stack(name).fp8_saved_inputs, core::Fp8SavedInputs::HighPrecision) << name;
  EXPECT_EQ(bad_message([](auto& j) { j.erase("fp8_saved_inputs"); }), "");
}

// The default stack by name is the one loaded once, not another copy of it.
TEST(StackSpec, TheDefaultStackIsLoadedOnce) {
  EXPECT_EQ(resolve_stack(kDefaultStack).get(), default_stack().get());
  EXPECT_NE(resolve_stack("torch-fsdp2").get(), resolve_stack("torch-fsdp2").get());
}

// What each stack runs (issue 43, item 2): read from "runs", names checked.
TEST(StackSpec, RunsListsItsStrategiesAndParallelism) {
  const StackSpec fsdp2 = load_stack("torch-fsdp2");
  ASSERT_TRUE(fsdp2.runs.strategies && fsdp2.runs.parallelism);
  EXPECT_EQ(*fsdp2.runs.strategies, (std::vector<std::string>{"ddp", "fsdp", "hsdp"}));
  EXPECT_EQ(*fsdp2.runs.parallelism, (std::vector<std::string>{"tp", "pp", "cp"}));
  EXPECT_EQ(*load_stack("deepspeed-zeropp").runs.parallelism, std::vector<std::string>{});  // none
  for (const auto& name : stack_catalog_names()) EXPECT_TRUE(load_stack(name).runs.strategies) << name;
  const std::string runs = R"({"strategies": ["fsdp"], "parallelism": ["tp"], "source": "s"})";
  EXPECT_EQ(bad_message([&](auto& j) { j["runs"] = nlohmann::json::parse(runs); }), "");
  EXPECT_NE(bad_message([](auto& j) {
              j["runs"] = {{"strategies", {"fsdp3"}}, {"source", "s"}};
            }).find("runs.strategies: expected a list of ddp|zero1"),
            std::string::npos);
  EXPECT_NE(bad_message([](auto& j) {
              j["runs"] = {{"strategies", {"fsdp", "fsdp"}}, {"source", "s"}};
            }).find("expected each name once"),
            std::string::npos);
  EXPECT_NE(bad_message([](auto& j) {
              j["runs"] = {{"strategies", nlohmann::json::array()}, {"source", "s"}};
            }).find("expected at least one name"),
            std::string::npos);
  EXPECT_NE(bad_message([](auto& j) {
              j["runs"] = {{"strategies", {"fsdp"}}, {"parallelism", {"dp"}}, {"source", "s"}};
            }).find("runs.parallelism: expected a list of tp|pp|cp|ep|ulysses"),
            std::string::npos);
}

TEST(StackSpec, UnknownNameListsTheCatalog) {
  try {
    (void)load_stack("torch-fsdp3");
    FAIL();
  } catch (const core::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("torch-fsdp2"), std::string::npos);
  }
}

}  // namespace
}  // namespace hzp::stacks
