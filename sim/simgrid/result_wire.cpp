// The forked simulation's report to its parent (see result_wire.hpp).
#include "sim/simgrid/result_wire.hpp"

#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "core/error.hpp"

namespace hzp::sim::simgrid {
namespace {

enum class Status : std::int64_t { Ok, Input, Schedule, Infeasible, Other };

void put(std::string& out, std::int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put(std::string& out, const std::string& s) {
  put(out, static_cast<std::int64_t>(s.size()));
  out += s;
}

struct Reader {
  const std::string& in;
  std::size_t at = 0;
  std::int64_t i64() {
    std::int64_t v = 0;
    if (at + sizeof v > in.size())
      throw std::runtime_error("simgrid engine: truncated result from the simulation process");
    std::memcpy(&v, in.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  std::string str() {
    const auto n = static_cast<std::size_t>(i64());
    if (at + n > in.size()) throw std::runtime_error("simgrid engine: truncated result from the simulation process");
    std::string s = in.substr(at, n);
    at += n;
    return s;
  }
};

}  // namespace

std::string encode_result(const SimResult& r) {
  std::string out;
  put(out, static_cast<std::int64_t>(Status::Ok));
  put(out, r.ranks_simulated);
  put(out, r.flows);
  put(out, static_cast<std::int64_t>(r.times.size()));
  for (std::size_t p = 0; p < r.times.size(); ++p) {
    put(out, r.emitted_rank[p]);
    put(out, static_cast<std::int64_t>(r.times[p].size()));
    for (const auto& st : r.times[p]) {
      put(out, static_cast<std::int64_t>(st.size()));
      for (const auto& t : st) {
        put(out, t.start.count_ns());
        put(out, t.end.count_ns());
      }
    }
  }
  return out;
}

std::string encode_error(const std::exception_ptr& e) {
  std::string out;
  try {
    std::rethrow_exception(e);
  } catch (const core::InputError& err) {
    put(out, static_cast<std::int64_t>(Status::Input));
    put(out, err.file());
    put(out, err.key());
    put(out, err.expected());
  } catch (const core::ScheduleError& err) {
    put(out, static_cast<std::int64_t>(Status::Schedule));
    put(out, std::string(err.what()));
  } catch (const core::InfeasibleError& err) {
    put(out, static_cast<std::int64_t>(Status::Infeasible));
    put(out, std::string(err.what()));
  } catch (const std::exception& err) {
    put(out, static_cast<std::int64_t>(Status::Other));
    put(out, std::string(err.what()));
  } catch (...) {
    put(out, static_cast<std::int64_t>(Status::Other));
    put(out, std::string("simgrid engine: unknown error in the simulation process"));
  }
  return out;
}

SimResult decode_result(const std::string& in) {
  Reader rd{in};
  const auto status = static_cast<Status>(rd.i64());
  switch (status) {
    case Status::Ok: break;
    case Status::Input: {
      std::string f = rd.str(), k = rd.str(), e = rd.str();
      throw core::InputError(f, k, e);
    }
    case Status::Schedule: throw core::ScheduleError(rd.str());
    case Status::Infeasible: throw core::InfeasibleError(rd.str());
    default: throw std::runtime_error(rd.str());
  }
  SimResult r;
  r.ranks_simulated = static_cast<int>(rd.i64());
  r.flows = rd.i64();
  r.times.resize(static_cast<std::size_t>(rd.i64()));
  r.emitted_rank.resize(r.times.size());
  for (std::size_t p = 0; p < r.times.size(); ++p) {
    r.emitted_rank[p] = static_cast<int>(rd.i64());
    r.times[p].resize(static_cast<std::size_t>(rd.i64()));
    for (auto& st : r.times[p]) {
      st.resize(static_cast<std::size_t>(rd.i64()));
      for (auto& t : st) {
        t.start = core::TimePoint::ns(rd.i64());
        t.end = core::TimePoint::ns(rd.i64());
      }
    }
  }
  return r;
}

}  // namespace hzp::sim::simgrid
