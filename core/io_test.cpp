// Atomic output: an interrupted write leaves the previous file intact.
#include "core/io.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.hpp"

namespace hzp::core {
namespace {

TEST(WriteFileAtomic, ReplacesWholeFile) {
  auto dir = std::filesystem::temp_directory_path() / ("hzp_io_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "out.json").string();
  write_file_atomic(path, "old");
  write_file_atomic(path, "new contents");
  EXPECT_EQ(read_file(path), "new contents");
  std::filesystem::remove_all(dir);
}

// A writer killed mid-write (SIGKILL: no chance to clean up) must leave the
// destination holding the old content or the complete new one, never a part.
TEST(WriteFileAtomic, KillDuringWriteKeepsPreviousFile) {
  auto dir = std::filesystem::temp_directory_path() / ("hzp_io_kill_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "trace.json").string();
  write_file_atomic(path, "previous");
  const std::string big(512u << 20, 'x');  // 512 MiB: the write takes long enough to be interrupted
  for (int attempt = 0; attempt < 3; ++attempt) {
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      write_file_atomic(path, big);
      ::_exit(0);
    }
    ::usleep(static_cast<useconds_t>(20000 * (attempt + 1)));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    const auto size = std::filesystem::file_size(path);
    EXPECT_TRUE(size == 8 || size == big.size()) << "partial file of " << size << " bytes";
    if (size == 8) {
      EXPECT_EQ(read_file(path), "previous");
    } else {
      write_file_atomic(path, "previous");
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(WriteFileAtomic, UnwritableFolderIsInputError) {
  EXPECT_THROW(write_file_atomic("/proc/hzp_cannot_write/x.json", "x"), InputError);
}

std::string slurp(const std::filesystem::path& p) { return read_file(p.string()); }

// A link planted where the temporary file would go is not written through,
// and the destination ends up a regular file (issue 19, item 2).
TEST(WriteFileAtomic, NeverWritesThroughAPlantedLink) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("hzp_io_link_{}", ::getpid());
  fs::create_directories(dir);
  write_file_atomic((dir / "victim.txt").string(), "keep");
  fs::create_symlink(dir / "victim.txt", dir / fmt::format(".s.json.tmp.{}", ::getpid()));
  write_file_atomic((dir / "s.json").string(), "summary");
  EXPECT_EQ(slurp(dir / "victim.txt"), "keep");
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(dir / "s.json")));
  EXPECT_EQ(slurp(dir / "s.json"), "summary");
  fs::remove_all(dir);
}

// A temporary file left by a killed hzp (a pid that no longer runs) is
// removed by the next write to the same destination (item 9).
TEST(WriteFileAtomic, RemovesStaleTemporariesOfDeadProcesses) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("hzp_io_stale_{}", ::getpid());
  fs::create_directories(dir);
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  int st = 0;
  ::waitpid(dead, &st, 0);
  const fs::path stale = dir / fmt::format(".t.json.tmp.{}", dead);
  write_file_atomic(stale.string(), "half a trace");
  write_file_atomic((dir / "t.json").string(), "trace");
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_EQ(slurp(dir / "t.json"), "trace");
  fs::remove_all(dir);
}

// The outputs of a run: all of them or none; each once; regular files only (items 6 and 7).
TEST(OutputSet, AllOrNoneEachOnceRegularFilesOnly) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("hzp_io_set_{}", ::getpid());
  fs::create_directories(dir);
  OutputSet bad;
  bad.add((dir / "t.json").string(), "trace");
  bad.add((dir / "t.csv").string(), "csv");
  bad.add("/proc/hzp_cannot_write/s.json", "summary");
  EXPECT_THROW(bad.commit(), InputError);
  EXPECT_FALSE(fs::exists(dir / "t.json"));
  EXPECT_FALSE(fs::exists(dir / "t.csv"));
  EXPECT_TRUE(fs::is_empty(dir));  // no temporary file left either
  // A folder made for an output is removed when a later one fails (issue 42,
  // item 13: an empty out/ was left behind).
  write_file_atomic((dir / "file").string(), "x");
  OutputSet nested;
  nested.add((dir / "out" / "run" / "t.json").string(), "trace");
  nested.add((dir / "file" / "s.json").string(), "summary");  // under a regular file: cannot be made
  EXPECT_THROW(nested.commit(), InputError);
  EXPECT_FALSE(fs::exists(dir / "out"));
  fs::remove(dir / "file");
  OutputSet twice;
  twice.add((dir / "x").string(), "a");
  EXPECT_THROW(twice.add((dir / "." / "x").string(), "b"), InputError);
  // Relative names of one file, one through "./" (found by tests/probe.sh).
  const fs::path cwd = fs::current_path();
  fs::current_path(dir);
  OutputSet relative;
  relative.add("y.json", "a");
  EXPECT_THROW(relative.add("./y.json", "b"), InputError);
  fs::current_path(cwd);
  OutputSet device;
  EXPECT_THROW(device.add("/dev/null", "x"), InputError);
  OutputSet good;
  good.add((dir / "a").string(), "1");
  good.add((dir / "b").string(), "2");
  good.commit();
  EXPECT_EQ(slurp(dir / "a") + slurp(dir / "b"), "12");
  fs::remove_all(dir);
}

// Inputs (issue 19, item 4): a regular file of at most HZP_MAX_INPUT_BYTES;
// a folder, a device or a FIFO is an InputError naming it, at once (a FIFO
// without a writer must not block, /dev/zero must not be read forever).
TEST(ReadFile, RegularFilesOnlyAndBounded) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("hzp_io_read_{}", ::getpid());
  fs::create_directories(dir);
  write_file_atomic((dir / "in.json").string(), std::string(100, 'x'));
  EXPECT_EQ(read_file((dir / "in.json").string()), std::string(100, 'x'));
  auto refused = [](const std::string& path, const std::string& want) {
    try {
      (void)read_file(path);
      ADD_FAILURE() << path << " was read";
    } catch (const InputError& e) {
      EXPECT_EQ(e.file(), path);
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  refused(dir.string(), "expected a regular file (it is a folder)");
  refused("/dev/zero", "expected a regular file (it is a character device)");
  fs::create_symlink("/dev/zero", dir / "zero.json");
  refused((dir / "zero.json").string(), "expected a regular file (it is a character device)");
  ASSERT_EQ(::mkfifo((dir / "fifo.json").c_str(), 0600), 0);
  refused((dir / "fifo.json").string(), "expected a regular file (it is a FIFO)");
  refused((dir / "missing.json").string(), "cannot open file");
  ::setenv("HZP_MAX_INPUT_BYTES", "99", 1);
  refused((dir / "in.json").string(), "expected at most 99 bytes (HZP_MAX_INPUT_BYTES), got 100");
  ::setenv("HZP_MAX_INPUT_BYTES", "1K", 1);
  EXPECT_EQ(max_input_bytes(), 1024);
  EXPECT_EQ(read_file((dir / "in.json").string()).size(), 100U);
  for (const char* bad : {"0", "-1", "1.5", "lots", "1T", "99999999999999"}) {
    ::setenv("HZP_MAX_INPUT_BYTES", bad, 1);
    EXPECT_THROW((void)max_input_bytes(), InputError) << bad;
  }
  ::unsetenv("HZP_MAX_INPUT_BYTES");
  EXPECT_EQ(max_input_bytes(), kDefaultMaxInputBytes);
  fs::remove_all(dir);
}

// A file hzp writes in place (a sweep database, issue 42 item 4): a planted
// link to a target or a dangling one, for the database or one of SQLite's
// side files, is refused naming it; a regular file or none passes.
TEST(RequireOwnFile, NeverThroughALink) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("hzp_io_own_{}", ::getpid());
  fs::create_directories(dir);
  const std::string db = (dir / "e1.db").string();
  EXPECT_NO_THROW(require_own_file(db));  // absent
  write_file_atomic((dir / "target").string(), "precious");
  auto refused = [](const std::string& path, const std::string& named, const std::string& want) {
    try {
      require_own_file(path);
      ADD_FAILURE() << path << " accepted";
    } catch (const InputError& e) {
      EXPECT_EQ(e.file(), named);
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  fs::create_symlink(dir / "target", db);
  refused(db, db, "not a symbolic link");
  fs::remove(db);
  fs::create_symlink(dir / "nowhere", db);  // dangling: SQLite would create its target
  refused(db, db, "not a symbolic link");
  fs::remove(db);
  write_file_atomic(db, "");
  EXPECT_NO_THROW(require_own_file(db));
  fs::create_symlink(dir / "target", db + "-wal");
  refused(db, db + "-wal", "not a symbolic link");
  fs::remove(db + "-wal");
  fs::create_directory(db + "-journal");
  refused(db, db + "-journal", "expected a regular file (it is a folder)");
  EXPECT_EQ(read_file((dir / "target").string()), "precious");
  fs::remove_all(dir);
}

// "-" is standard input, under the same limit.
TEST(ReadFile, DashIsStandardInput) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const int saved = ::dup(STDIN_FILENO);
  ASSERT_EQ(::dup2(fds[0], STDIN_FILENO), STDIN_FILENO);
  ::close(fds[0]);
  ASSERT_EQ(::write(fds[1], "{\"a\": 1}", 8), 8);
  ::close(fds[1]);
  EXPECT_EQ(read_file("-"), "{\"a\": 1}");
  ::dup2(saved, STDIN_FILENO);
  ::close(saved);
}

}  // namespace
}  // namespace hzp::core
