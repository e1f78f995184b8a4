// Schedule JSON I/O: canonical text, hashing and strict parsing.
#include "schedule/schedule.hpp"

#include <fmt/format.h>
#include <array>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>

#include "core/json_reader.hpp"
#include "core/sha256.hpp"
#include "schedule/names.hpp"

namespace hzp::core {
namespace {

Op op_from_json(StrictObject o) {
  const int id = static_cast<int>(o.integer("id", 0, INT32_MAX));
  Op op = Op::of(choose(o, "kind", kOpKind));
  op.id = id;
  op.name = o.str("name");
  op.role = choose(o, "role", kOpRole);
  op.param_class = choose(o, "param_class", kParamClass);
  auto bytes = [&] { return Bytes(o.integer("bytes", 0)); };
  switch (op.kind) {
    case OpKind::Compute: {
      auto& c = op.compute();
      c.kind = choose(o, "op", kComputeKind);
      c.flops = Flops(o.number("flops", 0));
      c.bytes = bytes();
      c.dtype = choose(o, "dtype", kDtype);
      if (o.has("gemm")) {
        const auto& g = o.array("gemm");
        if (g.size() != 4) o.fail("gemm", "expected [m, n, k, batch]");
        std::array<std::int64_t, 4> v{};
        for (std::size_t i = 0; i < 4; ++i) {
          if (!g[i].is_number_integer() || g[i].get<std::int64_t>() < 1)
            o.fail("gemm", "expected four positive integers [m, n, k, batch]");
          v[i] = g[i].get<std::int64_t>();
        }
        c.gemm = GemmShape{v[0], v[1], v[2], v[3]};
      }
      c.kernels = static_cast<int>(o.integer("kernels", 0, 1000000));
      if (o.has("attention_kernel")) {
        if (c.kind != ComputeKind::Attention) o.fail("attention_kernel", "expected only on attention ops");
        c.attention_kernel = choose(o, "attention_kernel", kAttentionKernels);
      }
      break;
    }
    case OpKind::Collective: {
      auto& c = op.collective();
      c.kind = choose(o, "op", kCollectiveKind);
      c.group = static_cast<int>(o.integer("group", 0, INT32_MAX));
      c.seq = static_cast<int>(o.integer("seq", 0, INT32_MAX));
      c.bytes = bytes();
      c.dtype = choose(o, "dtype", kDtype);
      break;
    }
    case OpKind::Send:
    case OpKind::Recv: {
      auto& t = op.transfer();
      t.peer = static_cast<int>(o.integer("peer", 0, INT32_MAX));
      t.seq = static_cast<int>(o.integer("seq", 0, INT32_MAX));
      t.bytes = bytes();
      break;
    }
    case OpKind::Alloc:
    case OpKind::Free: {
      auto& b = op.buffer();
      b.name = o.str("buffer");
      b.buffer_class = choose(o, "buffer_class", kBufferClass);
      b.bytes = bytes();
      break;
    }
    case OpKind::Record:
    case OpKind::Wait:
    case OpKind::Sync: op.event().id = static_cast<int>(o.integer("event", 0, INT32_MAX)); break;
  }
  o.finish();
  return op;
}

std::vector<int> int_list(StrictObject& o, const std::string& key) {
  std::vector<int> out;
  for (const auto& v : o.array(key)) {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > INT32_MAX) {
      o.fail(key, "expected an array of non-negative integers");
    }
    out.push_back(v.get<int>());
  }
  return out;
}

StepInfo step_from_json(StrictObject step) {
  StepInfo info;
  info.model = step.str("model");
  info.cluster = step.str("cluster");
  info.strategy = step.str("strategy");
  info.world_size = static_cast<int>(step.integer("world_size", 1, kMaxWorldSize));
  info.seq_len = step.integer("seq_len", 1, 1 << 24);
  info.global_batch_sequences = step.integer("global_batch_sequences", 1, 1LL << 40);
  info.micro_batches = step.integer("micro_batches", 1, 1 << 20);
  info.model_flops = Flops(step.number("model_flops", 0, 1e30));
  step.finish();
  return info;
}

Group group_from_json(StrictObject g, std::size_t i) {
  Group grp;
  grp.id = static_cast<int>(g.integer("id", 0, INT32_MAX));
  if (grp.id != static_cast<int>(i)) g.fail("id", fmt::format("expected {} (groups are numbered in order)", i));
  grp.kind = choose(g, "kind", kGroupKind);
  grp.ranks = int_list(g, "ranks");
  g.finish();
  return grp;
}

Thread thread_from_json(StrictObject to, std::size_t t) {
  Thread th;
  th.id = static_cast<int>(to.integer("id", 0, INT32_MAX));
  if (th.id != static_cast<int>(t)) to.fail("id", fmt::format("expected {} (threads are numbered in order)", t));
  th.name = to.str("name");
  th.launch_latency = Duration::ns(to.integer("launch_latency_ns", 0, 1000000000));
  th.collective_launch_latency = Duration::ns(to.integer("collective_launch_latency_ns", 0, 1000000000));
  th.event_latency = Duration::ns(to.integer("event_latency_ns", 0, 1000000000));
  th.alloc_latency = Duration::ns(to.integer("alloc_latency_ns", 0, 1000000000));
  th.sync_latency = Duration::ns(to.integer("sync_latency_ns", 0, 1000000000));
  to.finish();
  return th;
}

Stream stream_from_json(StrictObject so, std::size_t k) {
  Stream st;
  st.id = static_cast<int>(so.integer("id", 0, INT32_MAX));
  if (st.id != static_cast<int>(k)) so.fail("id", fmt::format("expected {} (streams are numbered in order)", k));
  st.name = so.str("name");
  st.kind = choose(so, "kind", kStreamKind);
  st.thread = static_cast<int>(so.integer("thread", 0, INT32_MAX));
  const auto& ops = so.array("ops");
  st.ops.reserve(ops.size());
  for (std::size_t n = 0; n < ops.size(); ++n) st.ops.push_back(op_from_json(so.element("ops", n)));
  so.finish();
  return st;
}

Program program_from_json(StrictObject p, std::size_t i) {
  Program prog;
  prog.id = static_cast<int>(p.integer("id", 0, INT32_MAX));
  if (prog.id != static_cast<int>(i)) p.fail("id", fmt::format("expected {} (programs are numbered in order)", i));
  prog.name = p.str("name");
  prog.ranks = int_list(p, "ranks");
  const auto& threads = p.array("threads");
  for (std::size_t t = 0; t < threads.size(); ++t) prog.threads.push_back(thread_from_json(p.element("threads", t), t));
  const auto& streams = p.array("streams");
  for (std::size_t k = 0; k < streams.size(); ++k) prog.streams.push_back(stream_from_json(p.element("streams", k), k));
  if (p.has("host_bytes")) prog.host_bytes = Bytes(p.integer("host_bytes", 0));
  p.finish();
  return prog;
}

}  // namespace

int dtype_bits(Dtype d) {
  switch (d) {
    case Dtype::Bf16:
    case Dtype::Fp16: return 16;
    case Dtype::Fp32: return 32;
    case Dtype::Fp8:
    case Dtype::Int8: return 8;
    case Dtype::Int4: return 4;
  }
  return 0;
}

std::int64_t dtype_bytes(Dtype d) {
  if (dtype_bits(d) % 8 != 0) throw std::logic_error(fmt::format("{} has no whole byte size", to_string(d)));
  return dtype_bits(d) / 8;
}

std::string_view to_string(Dtype e) { return name_of(kDtype, e); }
std::string_view to_string(GroupKind e) { return name_of(kGroupKind, e); }
Op Op::of(OpKind kind) {
  // One default of every alternative, in the variant's order: payload_index
  // alone says which kind carries which.
  static const auto defaults = []<std::size_t... I>(std::index_sequence<I...>) {
    return std::array<Payload, sizeof...(I)>{Payload(std::in_place_index<I>)...};
  }
  (std::make_index_sequence<std::variant_size_v<Payload>>{});
  Op op;
  op.kind = kind;
  op.payload = defaults[payload_index(kind)];
  return op;
}

std::string_view to_string(OpKind e) { return name_of(kOpKind, e); }
std::string_view to_string(ComputeKind e) { return name_of(kComputeKind, e); }
std::string_view to_string(CollectiveKind e) { return name_of(kCollectiveKind, e); }
std::string_view to_string(StreamKind e) { return name_of(kStreamKind, e); }
std::string_view to_string(OpRole e) { return name_of(kOpRole, e); }
std::string_view to_string(ParamClass e) { return name_of(kParamClass, e); }
std::string_view to_string(BufferClass e) { return name_of(kBufferClass, e); }

Schedule schedule_from_json(const std::string& text, const std::string& file, bool verify_hash) {
  nlohmann::json j = parse_json(text, file);
  StrictObject o(j, file);
  // A Schedule of an older schema: say what to do about it.
  if (auto v = j.find("schema_version");
      v != j.end() && v->is_number_integer() && v->get<std::int64_t>() < kScheduleSchemaVersion) {
    o.fail("schema_version", fmt::format("expected {} (a Schedule written by an older hzp; lower it again with "
                                         "`hzp schedule`), got {}",
                                         kScheduleSchemaVersion, v->get<std::int64_t>()));
  }
  require_schema_version(o, kScheduleSchemaVersion);
  Schedule s;
  s.name = o.str("name");
  const auto& prov = o.raw("provenance");
  if (!prov.is_object()) o.fail("provenance", "expected an object");
  s.provenance_json = prov.dump();
  s.step = step_from_json(o.object("step"));
  const auto& groups = o.array("groups");
  for (std::size_t i = 0; i < groups.size(); ++i) s.groups.push_back(group_from_json(o.element("groups", i), i));
  const auto& programs = o.array("programs");
  for (std::size_t i = 0; i < programs.size(); ++i) {
    s.programs.push_back(program_from_json(o.element("programs", i), i));
  }
  std::string recorded = o.str("sha256");
  o.finish();
  if (!verify_hash) return s;  // the hash streams the whole Schedule through SHA-256: only when asked
  std::string actual = schedule_hash(s);
  if (recorded != actual) {
    throw InputError(
        file, "sha256",
        fmt::format("content hash {} does not match the recorded {}: the file was edited", actual, recorded));
  }
  return s;
}

}  // namespace hzp::core
