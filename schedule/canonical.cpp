// The canonical encoding of a Schedule, streamed: the text nlohmann/json's
// dump() gives for the Schedule's JSON document (keys sorted, no whitespace),
// written piece by piece into a SHA-256 and/or a string without building the
// document. Hashing a 10,000-op Schedule is then the cost of its bytes.
#include <algorithm>
#include <array>
#include <charconv>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/sha256.hpp"
#include "schedule/schedule.hpp"

namespace hzp::core {
namespace {

// Where the text goes: a digest, a string, or both; buffered.
class Out {
 public:
  Out(Sha256* hash, std::string* text) : hash_(hash), text_(text) { buffer_.reserve(kFlushAt + 4096); }
  ~Out() { flush(); }
  Out(const Out&) = delete;
  Out& operator=(const Out&) = delete;

  void raw(std::string_view s) {
    buffer_ += s;
    if (buffer_.size() >= kFlushAt) flush();
  }
  /// Where a Members writes its values before they are copied out in order.
  std::string& scratch() { return scratch_; }
  void flush() {
    if (hash_) hash_->update(buffer_);
    if (text_) *text_ += buffer_;
    buffer_.clear();
  }

 private:
  static constexpr std::size_t kFlushAt = 1 << 16;
  Sha256* hash_;
  std::string* text_;
  std::string buffer_;
  std::string scratch_;
};

// A JSON string as nlohmann/json dumps it (UTF-8 kept, control characters
// escaped); anything unusual goes through nlohmann itself.
void append_string(std::string& out, std::string_view s) {
  const bool plain = std::all_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u < 0x80 && c != '"' && c != '\\';
  });
  if (!plain) {
    out += nlohmann::json(std::string(s)).dump();
    return;
  }
  out += '"';
  out += s;
  out += '"';
}

void append_int(std::string& out, std::int64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// A small object's members, written in sorted key order: each value is
// written into `scratch` as it comes (no allocation per member once the
// scratch has grown), then the members are copied out by key.
class Members {
 public:
  explicit Members(std::string& scratch) : scratch_(scratch) { scratch_.clear(); }
  void str(std::string_view key, std::string_view v) { append_string(add(key), v); }
  void i64(std::string_view key, std::int64_t v) { append_int(add(key), v); }
  void f64(std::string_view key, double v) { add(key) += nlohmann::json(v).dump(); }
  void ints(std::string_view key, std::initializer_list<std::int64_t> vs) {
    std::string& out = add(key);
    out += '[';
    bool first = true;
    for (std::int64_t v : vs) {
      if (!first) out += ',';
      first = false;
      append_int(out, v);
    }
    out += ']';
  }
  void write(Out& out) {
    close();
    std::sort(members_.begin(), members_.begin() + static_cast<std::ptrdiff_t>(count_),
              [](const Member& a, const Member& b) { return a.key < b.key; });
    out.raw("{");
    for (std::size_t i = 0; i < count_; ++i) {
      const Member& m = members_[i];
      out.raw(i ? ",\"" : "\"");  // keys are plain ASCII: no escapes
      out.raw(m.key);
      out.raw("\":");
      out.raw(std::string_view(scratch_).substr(m.begin, m.end - m.begin));
    }
    out.raw("}");
  }

 private:
  struct Member {
    std::string_view key;
    std::size_t begin = 0, end = 0;  // the value, in scratch_
  };
  void close() {
    if (count_ > 0) members_[count_ - 1].end = scratch_.size();
  }
  std::string& add(std::string_view key) {
    close();
    members_.at(count_++) = Member{key, scratch_.size(), scratch_.size()};
    return scratch_;
  }
  std::string& scratch_;
  std::array<Member, 16> members_{};
  std::size_t count_ = 0;
};

void write_ints(Out& out, const std::vector<int>& vs) {
  std::string text = "[";
  for (std::size_t i = 0; i < vs.size(); ++i) {
    if (i) text += ',';
    append_int(text, vs[i]);
  }
  text += ']';
  out.raw(text);
}

void write_key(Out& out, std::string_view key, bool first = false) {
  std::string text = first ? "" : ",";
  append_string(text, key);
  text += ':';
  out.raw(text);
}

void write_op(Out& out, const Op& op) {
  Members m(out.scratch());
  m.i64("id", op.id);
  m.str("kind", to_string(op.kind));
  m.str("name", op.name);
  m.str("role", to_string(op.role));
  m.str("param_class", to_string(op.param_class));
  switch (op.kind) {
    case OpKind::Compute: {
      const auto& c = op.compute();
      m.str("op", to_string(c.kind));
      m.f64("flops", c.flops.count());
      m.i64("bytes", c.bytes.count());
      m.str("dtype", to_string(c.dtype));
      if (c.gemm) m.ints("gemm", {c.gemm->m, c.gemm->n, c.gemm->k, c.gemm->batch});
      m.i64("kernels", c.kernels);
      if (c.attention_kernel) m.str("attention_kernel", to_string(*c.attention_kernel));
      break;
    }
    case OpKind::Collective: {
      const auto& c = op.collective();
      m.str("op", to_string(c.kind));
      m.i64("group", c.group);
      m.i64("seq", c.seq);
      m.i64("bytes", c.bytes.count());
      m.str("dtype", to_string(c.dtype));
      break;
    }
    case OpKind::Send:
    case OpKind::Recv: {
      const auto& t = op.transfer();
      m.i64("peer", t.peer);
      m.i64("seq", t.seq);
      m.i64("bytes", t.bytes.count());
      break;
    }
    case OpKind::Alloc:
    case OpKind::Free: {
      const auto& b = op.buffer();
      m.str("buffer", b.name);
      m.str("buffer_class", to_string(b.buffer_class));
      m.i64("bytes", b.bytes.count());
      break;
    }
    case OpKind::Record:
    case OpKind::Wait:
    case OpKind::Sync: m.i64("event", op.event().id); break;
  }
  m.write(out);
}

// Keys in sorted order: id, kind, name, ops, thread.
void write_stream(Out& out, const Stream& st) {
  std::string head = "{\"id\":";
  append_int(head, st.id);
  head += ",\"kind\":";
  append_string(head, to_string(st.kind));
  head += ",\"name\":";
  append_string(head, st.name);
  head += ",\"ops\":[";
  out.raw(head);
  for (std::size_t i = 0; i < st.ops.size(); ++i) {
    if (i) out.raw(",");
    write_op(out, st.ops[i]);
  }
  std::string tail = "],\"thread\":";
  append_int(tail, st.thread);
  tail += '}';
  out.raw(tail);
}

// Keys in sorted order: [host_bytes,] id, name, ranks, streams, threads.
void write_program(Out& out, const Program& p) {
  std::string head = "{";
  if (p.host_bytes.count() > 0) {
    head += "\"host_bytes\":";
    append_int(head, p.host_bytes.count());
    head += ',';
  }
  head += "\"id\":";
  append_int(head, p.id);
  head += ",\"name\":";
  append_string(head, p.name);
  head += ",\"ranks\":";
  out.raw(head);
  write_ints(out, p.ranks);
  out.raw(",\"streams\":[");
  for (std::size_t i = 0; i < p.streams.size(); ++i) {
    if (i) out.raw(",");
    write_stream(out, p.streams[i]);
  }
  out.raw("],\"threads\":[");
  for (std::size_t i = 0; i < p.threads.size(); ++i) {
    if (i) out.raw(",");
    const Thread& t = p.threads[i];
    Members m(out.scratch());
    m.i64("id", t.id);
    m.str("name", t.name);
    m.i64("launch_latency_ns", t.launch_latency.count_ns());
    m.i64("collective_launch_latency_ns", t.collective_launch_latency.count_ns());
    m.i64("event_latency_ns", t.event_latency.count_ns());
    m.i64("alloc_latency_ns", t.alloc_latency.count_ns());
    m.i64("sync_latency_ns", t.sync_latency.count_ns());
    m.write(out);
  }
  out.raw("]}");
}

// Top-level keys in sorted order: groups, name, programs, provenance,
// schema_version, [sha256,] step.
void write_schedule(Out& out, const Schedule& s, const std::string* sha256) {
  out.raw("{\"groups\":[");
  for (std::size_t i = 0; i < s.groups.size(); ++i) {
    if (i) out.raw(",");
    const Group& g = s.groups[i];
    std::string text = "{\"id\":";
    append_int(text, g.id);
    text += ",\"kind\":";
    append_string(text, to_string(g.kind));
    text += ",\"ranks\":";
    out.raw(text);
    write_ints(out, g.ranks);
    out.raw("}");
  }
  out.raw("]");
  write_key(out, "name");
  std::string name;
  append_string(name, s.name);
  out.raw(name);
  write_key(out, "programs");
  out.raw("[");
  for (std::size_t i = 0; i < s.programs.size(); ++i) {
    if (i) out.raw(",");
    write_program(out, s.programs[i]);
  }
  out.raw("]");
  write_key(out, "provenance");
  out.raw(nlohmann::json::parse(s.provenance_json).dump());
  write_key(out, "schema_version");
  out.raw(std::to_string(kScheduleSchemaVersion));
  if (sha256) {
    write_key(out, "sha256");
    std::string h;
    append_string(h, *sha256);
    out.raw(h);
  }
  write_key(out, "step");
  Members step(out.scratch());
  step.str("model", s.step.model);
  step.str("cluster", s.step.cluster);
  step.str("strategy", s.step.strategy);
  step.i64("world_size", s.step.world_size);
  step.i64("seq_len", s.step.seq_len);
  step.i64("global_batch_sequences", s.step.global_batch_sequences);
  step.i64("micro_batches", s.step.micro_batches);
  step.f64("model_flops", s.step.model_flops.count());
  step.write(out);
  out.raw("}");
}

}  // namespace

std::string schedule_hash(const Schedule& s) {
  Sha256 h;
  {
    Out out(&h, nullptr);
    write_schedule(out, s, nullptr);
  }
  return h.hex();
}

std::string to_canonical_json(const Schedule& s) {
  const std::string hash = schedule_hash(s);
  std::string text;
  {
    Out out(nullptr, &text);
    write_schedule(out, s, &hash);
  }
  return text;
}

}  // namespace hzp::core
