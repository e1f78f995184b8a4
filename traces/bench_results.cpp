// Microbenchmark results (see bench_results.hpp).
#include "traces/bench_results.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_reader.hpp"

namespace hzp::traces {
namespace {

template <class E, std::size_t N>
E parse_named(core::StrictObject& o, const std::string& key, const E (&values)[N]) {
  const std::string s = o.str(key);
  std::string names;
  for (E v : values) {
    if (s == core::to_string(v)) return v;
    names += (names.empty() ? "" : "|") + std::string(core::to_string(v));
  }
  o.fail(key, fmt::format("expected {}, got \"{}\"", names, s));
}

constexpr core::Dtype kDtypes[] = {core::Dtype::Bf16, core::Dtype::Fp16, core::Dtype::Fp32, core::Dtype::Fp8};
constexpr core::CollectiveKind kCollectives[] = {core::CollectiveKind::AllGather, core::CollectiveKind::ReduceScatter,
                                                 core::CollectiveKind::AllReduce, core::CollectiveKind::AllToAll,
                                                 core::CollectiveKind::Broadcast};

}  // namespace

std::string to_json(const BenchResults& r) {
  nlohmann::ordered_json j;
  j["schema_version"] = kBenchSchemaVersion;
  j["kind"] = r.kind;
  j["device"] = r.device;
  j["provenance"] = r.provenance;
  auto& out = j["results"] = nlohmann::ordered_json::array();
  for (const auto& g : r.gemm) {
    out.push_back({{"m", g.m},
                   {"n", g.n},
                   {"k", g.k},
                   {"batch", g.batch},
                   {"dtype", core::to_string(g.dtype)},
                   {"seconds", g.seconds}});
  }
  for (const auto& c : r.collectives) {
    out.push_back({{"collective", core::to_string(c.collective)},
                   {"bytes", c.bytes},
                   {"ranks", c.ranks},
                   {"ranks_per_node", c.ranks_per_node},
                   {"seconds", c.seconds}});
  }
  for (const auto& o : r.overlap) {
    out.push_back({{"m", o.m},
                   {"n", o.n},
                   {"k", o.k},
                   {"collective", core::to_string(o.collective)},
                   {"bytes", o.bytes},
                   {"channels", o.channels},
                   {"alone_seconds", o.alone_seconds},
                   {"overlapped_seconds", o.overlapped_seconds}});
  }
  return j.dump(2) + "\n";
}

BenchResults bench_results_from_json(const std::string& text, const std::string& file) {
  const nlohmann::json j = core::parse_json(text, file);
  core::StrictObject o(j, file);
  core::require_schema_version(o, kBenchSchemaVersion);
  BenchResults r;
  r.kind = o.str("kind");
  if (r.kind != "gemm" && r.kind != "collectives" && r.kind != "overlap") {
    o.fail("kind", fmt::format("expected gemm, collectives or overlap, got \"{}\"", r.kind));
  }
  r.device = o.str("device");
  const nlohmann::json& prov = o.raw("provenance");
  if (!prov.is_object()) o.fail("provenance", "expected an object of strings (GPU, driver, versions, date)");
  for (const auto& [k, v] : prov.items()) {
    if (!v.is_string()) o.fail("provenance." + k, "expected a string");
    r.provenance[k] = v.get<std::string>();
  }
  const nlohmann::json& results = o.array("results");
  if (results.empty()) o.fail("results", "expected at least one measurement");
  for (std::size_t i = 0; i < results.size(); ++i) {
    core::StrictObject e = o.element("results", i);
    if (r.kind == "gemm") {
      GemmResult g;
      g.m = e.integer("m", 1);
      g.n = e.integer("n", 1);
      g.k = e.integer("k", 1);
      g.batch = e.integer("batch", 1);
      g.dtype = parse_named(e, "dtype", kDtypes);
      g.seconds = e.number("seconds", 0, 1e6, true);
      r.gemm.push_back(g);
    } else if (r.kind == "collectives") {
      CollectiveResult c;
      c.collective = parse_named(e, "collective", kCollectives);
      c.bytes = e.integer("bytes", 1);
      c.ranks = static_cast<int>(e.integer("ranks", 2, 1 << 20));
      c.ranks_per_node = static_cast<int>(e.integer("ranks_per_node", 1, 1 << 10));
      if (c.ranks % c.ranks_per_node != 0) e.fail("ranks_per_node", "expected a divisor of ranks");
      c.seconds = e.number("seconds", 0, 1e6, true);
      r.collectives.push_back(c);
    } else {
      OverlapResult v;
      v.m = e.integer("m", 1);
      v.n = e.integer("n", 1);
      v.k = e.integer("k", 1);
      v.collective = parse_named(e, "collective", kCollectives);
      v.bytes = e.integer("bytes", 1);
      v.channels = static_cast<int>(e.integer("channels", 1, 1024));
      v.alone_seconds = e.number("alone_seconds", 0, 1e6, true);
      v.overlapped_seconds = e.number("overlapped_seconds", 0, 1e6, true);
      r.overlap.push_back(v);
    }
    e.finish();
  }
  o.finish();
  return r;
}

}  // namespace hzp::traces
