// Fuzz target: Schedules — parse (hash not required), check, simulate with the
// analytic engine, compute metrics and write the trace.
#include "fuzz_harness.hpp"
#include "schedule/check.hpp"
#include "schedule/schedule.hpp"
#include "sim/engine.hpp"
#include "sim/metrics.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return hzp::fuzz::run(data, size, [](const std::string& text) {
    using namespace hzp;
    core::Schedule s = core::schedule_from_json(text, "fuzz.json", /*verify_hash=*/false);
    core::check_schedule(s);
    if (s.step.world_size > 4096) return;
    const int devices = (s.step.world_size + 7) / 8 * 8;
    static const topologies::ClusterSpec spec = topologies::load_cluster("dgx-h100");
    cost::PerfModel pm(topologies::Topology(spec, devices));
    auto engine = sim::make_engine("analytic", pm);
    traces::TimelineRecorder rec;
    traces::TraceHeader header;
    header.schedule_sha256 = "fuzz";  // a given hash: the engine does not stream the Schedule through SHA-256
    engine->run(s, header, rec);
    (void)sim::compute_metrics(s, rec.timeline(), spec.device);
    (void)traces::to_chrome_trace(rec.timeline());
  });
}
