// The sweep database in a build without SQLite (the runtime-only build for
// GPU machines, CMakeLists.txt HZP_RUNTIME_ONLY): opening or reading one is
// refused with one line naming the database; nothing is created on disk.
#include <stdexcept>

#include "core/error.hpp"
#include "explore/sweep_db.hpp"

namespace hzp::explore {
namespace {

[[noreturn]] void no_sqlite(const std::string& path) {
  throw core::InputError(path, "--db",
                         "expected a build of hzp with SQLite (this one was configured without it: a runtime-only build; "
                         "sweeps need the full build)");
}

}  // namespace

SweepDb::SweepDb(const std::string& path, const std::string&, const std::string&) : path_(path) { no_sqlite(path); }
SweepDb::~SweepDb() = default;
// A SweepDb is never constructed in this build: its members are unreachable.
std::set<std::string> SweepDb::done() const { no_sqlite(path_); }
void SweepDb::add(const nlohmann::ordered_json&) { no_sqlite(path_); }
void SweepDb::flush() { no_sqlite(path_); }
int SweepDb::merge_from(const std::string&) { no_sqlite(path_); }
std::vector<nlohmann::ordered_json> SweepDb::rows() const { no_sqlite(path_); }
void SweepDb::exec(const std::string&) const { no_sqlite(path_); }
void SweepDb::record_other_spec(const std::string&, const std::string&) const { no_sqlite(path_); }
std::pair<std::string, std::string> sweep_db_meta(const std::string& path) { no_sqlite(path); }

}  // namespace hzp::explore
