// Strict config reading: the error names the file, the key path and what was expected.
#include "core/json_reader.hpp"

#include <gtest/gtest.h>

namespace hzp::core {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(StrictObject, ReadsKnownKeys) {
  auto j = nlohmann::json::parse(R"({"a": 3, "b": {"c": 1.5}, "d": null})");
  StrictObject o(j, "f.json");
  EXPECT_EQ(o.integer("a", 1, 10), 3);
  auto b = o.object("b");
  EXPECT_DOUBLE_EQ(b.number("c", 0), 1.5);
  b.finish();
  EXPECT_FALSE(o.object_or_null("d").has_value());
  o.finish();
}

TEST(StrictObject, UnknownKeyNamesFileAndPath) {
  auto j = nlohmann::json::parse(R"({"b": {"c": 1, "cc": 2}})");
  StrictObject o(j, "f.json");
  auto b = o.object("b");
  (void)b.integer("c");
  EXPECT_EQ(error_of([&] { b.finish(); }), "f.json: b.cc: unknown key");
}

TEST(StrictObject, MissingKeyAndRange) {
  auto j = nlohmann::json::parse(R"({"a": -1, "s": 5})");
  StrictObject o(j, "f.json");
  EXPECT_EQ(error_of([&] { (void)o.integer("zz"); }), "f.json: zz: missing required key");
  EXPECT_EQ(error_of([&] { (void)o.integer("a", 1, 4); }), "f.json: a: expected an integer in [1, 4], got -1");
  EXPECT_EQ(error_of([&] { (void)o.str("s"); }), "f.json: s: expected a string");
}

TEST(StrictObject, ErrorEchoingInputStaysOneLine) {
  // A JSON string may decode to newlines and other control characters; the
  // error that echoes it must still be one line.
  auto j = nlohmann::json::parse(R"({"a\nb": 1})");
  StrictObject o(j, "f.json");
  EXPECT_EQ(error_of([&] { o.finish(); }), "f.json: a\\nb: unknown key");
  EXPECT_EQ(InputError("f.json", "k", std::string("got \"x\ty\r\x01\"")).what(),
            std::string("f.json: k: got \"x\\ty\\r\\x01\""));
  EXPECT_EQ(std::string(ScheduleError("op 'a\nb'").what()), "op 'a\\nb'");
}

TEST(ParseJson, SyntaxErrorNamesFile) {
  EXPECT_EQ(error_of([] { (void)parse_json("{\"a\": ", "x.json"); }).rfind("x.json: not valid JSON", 0), 0u);
}

}  // namespace
}  // namespace hzp::core
