// The sweep database (see sweep_db.hpp).
#include "explore/sweep_db.hpp"

#include <fmt/format.h>
#include <sqlite3.h>
#include <chrono>
#include <filesystem>

#include "core/error.hpp"
#include "core/io.hpp"

namespace hzp::explore {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// A prepared statement that finalizes itself.
struct Stmt {
  sqlite3_stmt* s = nullptr;
  Stmt(sqlite3* db, const std::string& sql, const std::string& path) {
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) != SQLITE_OK) {
      throw core::InputError(path, "points", fmt::format("expected an hzp sweep database ({})", sqlite3_errmsg(db)));
    }
  }
  ~Stmt() { sqlite3_finalize(s); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
};

nlohmann::ordered_json column_value(sqlite3_stmt* s, int i) {
  switch (sqlite3_column_type(s, i)) {
    case SQLITE_INTEGER: return sqlite3_column_int64(s, i);
    case SQLITE_FLOAT: return sqlite3_column_double(s, i);
    case SQLITE_TEXT: return std::string(reinterpret_cast<const char*>(sqlite3_column_text(s, i)));
    default: return nullptr;
  }
}

// The column list as text: a database made with other columns is refused.
std::string column_signature() {
  std::string s;
  for (const auto& [name, type] : SweepDb::columns()) s += (s.empty() ? "" : ",") + name + " " + type;
  return s;
}

}  // namespace

SweepDb::SweepDb(const std::string& path, const std::string& spec_hash, const std::string& spec_json)
    : path_(path), last_commit_(now_s()) {
  // Written in place: never through a planted link (nor a FIFO SQLite would
  // block on); NOFOLLOW keeps a link made after the check out too.
  core::require_own_file(path);
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOFOLLOW,
                      nullptr) != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw core::InputError(path, "", fmt::format("expected a writable sweep database ({})", msg));
  }
  sqlite3_busy_timeout(db_, 10000);
  try {
    {
      // A new file, or a sweep database (it has `meta`): never add tables to another SQLite file.
      Stmt tables(db_, "SELECT count(*), sum(name = 'meta') FROM sqlite_master WHERE type = 'table'", path_);
      if (sqlite3_step(tables.s) == SQLITE_ROW && sqlite3_column_int(tables.s, 0) > 0 &&
          sqlite3_column_int(tables.s, 1) == 0) {
        throw core::InputError(path, "", "expected an hzp sweep database or a new file (it holds other tables)");
      }
    }
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=FULL");
    exec("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT)");
    std::string cols;
    for (const auto& [name, type] : columns()) {
      cols += fmt::format("{}{} {}{}", cols.empty() ? "" : ", ", name, type, name == "key" ? " UNIQUE NOT NULL" : "");
    }
    exec(fmt::format("CREATE TABLE IF NOT EXISTS points ({})", cols));
    Stmt get(db_, "SELECT value FROM meta WHERE name = 'spec_sha256'", path_);
    if (sqlite3_step(get.s) == SQLITE_ROW) {
      const std::string have = reinterpret_cast<const char*>(sqlite3_column_text(get.s, 0));
      Stmt have_cols(db_, "SELECT value FROM meta WHERE name = 'columns'", path_);
      const bool same = sqlite3_step(have_cols.s) == SQLITE_ROW &&
                        reinterpret_cast<const char*>(sqlite3_column_text(have_cols.s, 0)) == column_signature();
      if (!same) {
        throw core::InputError(path, "meta.columns",
                               "expected the columns of this hzp's sweep rows (the database was made by another "
                               "version); use another --db");
      }
      // Another sweep's points join this one's: rows are keyed by their full
      // inputs, so a point both sweeps hold is run once. The first sweep's
      // spec stays `spec`; each further one is kept as `spec.<sha256>`.
      if (have != spec_hash) record_other_spec(spec_hash, spec_json);
    } else {
      Stmt put(db_, "INSERT INTO meta (name, value) VALUES ('spec_sha256', ?1), ('spec', ?2), ('columns', ?3)", path_);
      sqlite3_bind_text(put.s, 1, spec_hash.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(put.s, 2, spec_json.c_str(), -1, SQLITE_TRANSIENT);
      const std::string signature = column_signature();
      sqlite3_bind_text(put.s, 3, signature.c_str(), -1, SQLITE_TRANSIENT);
      if (sqlite3_step(put.s) != SQLITE_DONE) {
        throw core::InputError(path, "meta", fmt::format("cannot record the sweep ({})", sqlite3_errmsg(db_)));
      }
    }
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

void SweepDb::record_other_spec(const std::string& spec_hash, const std::string& spec_json) const {
  Stmt put(db_, "INSERT OR IGNORE INTO meta (name, value) VALUES (?1, ?2)", path_);
  const std::string name = "spec." + spec_hash;
  sqlite3_bind_text(put.s, 1, name.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(put.s, 2, spec_json.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(put.s) != SQLITE_DONE) {
    throw core::InputError(path_, "meta", fmt::format("cannot record the sweep ({})", sqlite3_errmsg(db_)));
  }
}

SweepDb::~SweepDb() {
  if (!db_) return;
  try {
    flush();
  } catch (...) {  // a destructor must not throw; rows not committed are recomputed on resume
  }
  sqlite3_close(db_);
}

void SweepDb::exec(const std::string& sql) const {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    throw core::InputError(path_, "", fmt::format("expected an hzp sweep database ({}: {})", sql.substr(0, 40), msg));
  }
}

std::set<std::string> SweepDb::done() const {
  std::set<std::string> keys;
  Stmt q(db_, "SELECT key FROM points", path_);
  while (sqlite3_step(q.s) == SQLITE_ROW) keys.insert(reinterpret_cast<const char*>(sqlite3_column_text(q.s, 0)));
  return keys;
}

void SweepDb::add(const nlohmann::ordered_json& row) {
  if (pending_ == 0) exec("BEGIN IMMEDIATE");
  std::string names, params;
  const auto& cols = columns();
  for (std::size_t i = 0; i < cols.size(); ++i) {
    names += (i ? ", " : "") + cols[i].first;
    params += fmt::format("{}?{}", i ? ", " : "", i + 1);
  }
  Stmt ins(db_, fmt::format("INSERT OR IGNORE INTO points ({}) VALUES ({})", names, params), path_);
  for (std::size_t i = 0; i < cols.size(); ++i) {
    const int at = static_cast<int>(i + 1);
    auto it = row.find(cols[i].first);
    if (it == row.end() || it->is_null()) {
      sqlite3_bind_null(ins.s, at);
    } else if (it->is_boolean()) {
      sqlite3_bind_int(ins.s, at, it->get<bool>() ? 1 : 0);
    } else if (it->is_number_integer()) {
      sqlite3_bind_int64(ins.s, at, it->get<std::int64_t>());
    } else if (it->is_number()) {
      sqlite3_bind_double(ins.s, at, it->get<double>());
    } else {
      const std::string text = it->is_string() ? it->get<std::string>() : it->dump();
      sqlite3_bind_text(ins.s, at, text.c_str(), -1, SQLITE_TRANSIENT);
    }
  }
  if (sqlite3_step(ins.s) != SQLITE_DONE) {
    throw std::runtime_error(fmt::format("{}: cannot record a point ({})", path_, sqlite3_errmsg(db_)));
  }
  ++pending_;
  // Commit in small batches: durable within a quarter second, cheap at high rates.
  if (pending_ >= 64 || now_s() - last_commit_ > 0.25) flush();
}

void SweepDb::flush() {
  if (pending_ == 0) return;
  exec("COMMIT");
  pending_ = 0;
  last_commit_ = now_s();
}

int SweepDb::merge_from(const std::string& other) {
  flush();
  const int before = sqlite3_total_changes(db_);
  Stmt att(db_, "ATTACH DATABASE ?1 AS shard", path_);
  sqlite3_bind_text(att.s, 1, other.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(att.s) != SQLITE_DONE) {
    throw core::InputError(other, "", fmt::format("cannot open ({})", sqlite3_errmsg(db_)));
  }
  std::string names;
  for (const auto& [name, type] : columns()) names += (names.empty() ? "" : ", ") + name;
  try {
    exec(fmt::format("INSERT OR IGNORE INTO points ({0}) SELECT {0} FROM shard.points", names));
  } catch (...) {
    exec("DETACH DATABASE shard");
    throw;
  }
  exec("DETACH DATABASE shard");
  return sqlite3_total_changes(db_) - before;
}

std::vector<nlohmann::ordered_json> SweepDb::rows() const {
  std::vector<nlohmann::ordered_json> out;
  std::string names;
  for (const auto& [name, type] : columns()) names += (names.empty() ? "" : ", ") + name;
  Stmt q(db_, fmt::format("SELECT {} FROM points ORDER BY point", names), path_);
  while (sqlite3_step(q.s) == SQLITE_ROW) {
    nlohmann::ordered_json r = nlohmann::ordered_json::object();
    for (std::size_t i = 0; i < columns().size(); ++i) r[columns()[i].first] = column_value(q.s, static_cast<int>(i));
    out.push_back(std::move(r));
  }
  return out;
}

std::pair<std::string, std::string> sweep_db_meta(const std::string& path) {
  if (!std::filesystem::exists(path)) throw core::InputError(path, "", "no such sweep database");
  core::require_regular_file(path, /*may_be_missing=*/false);  // SQLite would block on a FIFO
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    throw core::InputError(path, "", "expected an hzp sweep database");
  }
  std::pair<std::string, std::string> meta;
  sqlite3_stmt* s = nullptr;
  const bool ok = sqlite3_prepare_v2(db, "SELECT name, value FROM meta", -1, &s, nullptr) == SQLITE_OK;
  while (ok && sqlite3_step(s) == SQLITE_ROW) {
    std::string name = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    std::string value = reinterpret_cast<const char*>(sqlite3_column_text(s, 1));
    if (name == "spec_sha256") meta.first = value;
    if (name == "spec") meta.second = value;
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  if (meta.first.empty()) throw core::InputError(path, "meta", "expected an hzp sweep database");
  return meta;
}

}  // namespace hzp::explore
