// How long `hzp simulate` takes: Llama-3 70B on 1,024 H100s under FSDP,
// whole (inputs -> plan -> analytic engine -> metrics) and by stage.
// Run: build/bench/hzp_bench --benchmark_repetitions=10 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "explore/scenario.hpp"
#include "schedule/replay.hpp"
#include "sim/emit.hpp"
#include "sim/engine.hpp"

namespace {

using namespace hzp;

explore::Scenario scenario() {
  explore::Scenario sc;
  sc.model = "llama3-70b";
  sc.cluster = "dgx-h100";
  sc.gpus = 1024;
  sc.strategies = {plan::Strategy::Fsdp};
  sc.plan.global_batch_tokens = 16LL << 20;
  sc.plan.recompute = models::Recompute::Full;
  return sc;
}

void BM_SimulateLlama70bFsdp1024(benchmark::State& state) {
  explore::Scenario sc = scenario();
  for (auto _ : state) {
    explore::ScenarioResult r = explore::run_scenario(sc);
    benchmark::DoNotOptimize(r.runs[0].metrics.step_time);
  }
}
BENCHMARK(BM_SimulateLlama70bFsdp1024)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_LowerLlama70bFsdp1024(benchmark::State& state) {
  explore::Scenario sc = scenario();
  for (auto _ : state) {
    core::Schedule s = explore::build_schedule(sc, plan::Strategy::Fsdp);
    benchmark::DoNotOptimize(s.programs.size());
  }
}
BENCHMARK(BM_LowerLlama70bFsdp1024)->Unit(benchmark::kMillisecond)->UseRealTime();

// The engine's walk and its timeline into a recorder: with op names (what a
// trace or CSV needs) or without (what simulate, sweeps, cases and plan
// search record since issue 41 item 2).
void analytic_engine(benchmark::State& state, bool names) {
  explore::Scenario sc = scenario();
  core::Schedule s = explore::build_schedule(sc, plan::Strategy::Fsdp);
  cost::PerfModel pm(topologies::Topology(topologies::load_cluster(sc.cluster), sc.gpus));
  auto engine = sim::make_engine("analytic", pm);
  std::size_t ops = 0;
  for (const auto& st : s.programs[0].streams) ops += st.ops.size();
  traces::TraceHeader header;
  header.schedule_sha256 = core::schedule_hash(s);  // hashed once per Schedule, outside the engine
  for (auto _ : state) {
    traces::TimelineRecorder rec(names);
    engine->run(s, header, rec);
    benchmark::DoNotOptimize(rec.timeline().ops.size());
  }
  state.counters["schedule_ops"] = static_cast<double>(ops);
}
void BM_AnalyticEngineLlama70bFsdp1024(benchmark::State& state) { analytic_engine(state, true); }
BENCHMARK(BM_AnalyticEngineLlama70bFsdp1024)->Unit(benchmark::kMillisecond)->UseRealTime();
void BM_AnalyticEngineLlama70bFsdp1024Nameless(benchmark::State& state) { analytic_engine(state, false); }
BENCHMARK(BM_AnalyticEngineLlama70bFsdp1024Nameless)->Unit(benchmark::kMillisecond)->UseRealTime();

// The analytic engine by part, on the same Schedule: what every walk shares
// (ReplayPlan), one walk at constant costs, and the timeline emitted from a
// walk's times into a recorder without names.
void BM_ReplayPlanLlama70bFsdp1024(benchmark::State& state) {
  core::Schedule s = explore::build_schedule(scenario(), plan::Strategy::Fsdp);
  for (auto _ : state) {
    core::ReplayPlan plan(s);
    benchmark::DoNotOptimize(&plan);
  }
}
BENCHMARK(BM_ReplayPlanLlama70bFsdp1024)->Unit(benchmark::kMillisecond)->UseRealTime();

core::ReplayCosts unit_costs() {
  core::ReplayCosts costs;
  costs.compute = [](const core::Program&, const core::Op&) { return core::Duration::us(10); };
  costs.collective = [](const core::Group&, const core::Op&) { return core::Duration::us(50); };
  costs.p2p = [](const core::Program&, const core::Op&) { return core::Duration::us(20); };
  return costs;
}

void BM_ReplayWalkLlama70bFsdp1024(benchmark::State& state) {
  core::Schedule s = explore::build_schedule(scenario(), plan::Strategy::Fsdp);
  const core::ReplayPlan plan(s);
  const core::ReplayCosts costs = unit_costs();
  for (auto _ : state) benchmark::DoNotOptimize(plan.replay(costs).times.size());
}
BENCHMARK(BM_ReplayWalkLlama70bFsdp1024)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_EmitTimelineLlama70bFsdp1024Nameless(benchmark::State& state) {
  core::Schedule s = explore::build_schedule(scenario(), plan::Strategy::Fsdp);
  const core::ReplayResult r = core::replay(s, unit_costs());
  traces::TraceHeader header;
  for (auto _ : state) {
    traces::TimelineRecorder rec(false);
    sim::emit_timeline(s, r, header, rec);
    benchmark::DoNotOptimize(rec.timeline().ops.size());
  }
}
BENCHMARK(BM_EmitTimelineLlama70bFsdp1024Nameless)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_HashLlama70bFsdp1024Schedule(benchmark::State& state) {
  core::Schedule s = explore::build_schedule(scenario(), plan::Strategy::Fsdp);
  for (auto _ : state) benchmark::DoNotOptimize(core::schedule_hash(s));
}
BENCHMARK(BM_HashLlama70bFsdp1024Schedule)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
