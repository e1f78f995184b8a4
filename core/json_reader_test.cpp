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

TEST(StrictObject, UnknownKeyNamesTheKeyItLikelyMisspells) {
  auto j = nlohmann::json::parse(R"({"hidden": 64, "layres": 2})");
  StrictObject o(j, "m.json");
  (void)o.integer("hidden");
  (void)o.has("layers");  // an optional key the reader knows, absent here
  EXPECT_EQ(error_of([&] { o.finish(); }), "m.json: layres: unknown key (did you mean \"layers\"?)");
}

// The schema of what a reader asks: a key every object held is required, one
// read only when present (has) or not in every object is not; ranges as checked.
TEST(SchemaRecorder, DerivesTheSchemaTheReaderEnforces) {
  SchemaRecorder rec;
  {
    SchemaRecorder::Scope scope(rec);
    for (const char* text : {R"({"n": 3, "big": 7, "tiers": [{"r": 2}, {"r": 4, "x": 1.5}]})",
                             R"({"n": 1, "big": 0, "opt": true, "tiers": []})"}) {
      auto j = nlohmann::json::parse(text);
      StrictObject o(j, "f.json");
      (void)o.integer("n", 1, 8);
      (void)o.integer("big", 0, INT64_MAX);
      if (o.has("opt")) (void)o.boolean("opt");
      const auto& tiers = o.array("tiers");
      for (std::size_t i = 0; i < tiers.size(); ++i) {
        StrictObject t = o.element("tiers", i);
        (void)t.integer("r", 2, 64);
        if (t.has("x")) (void)t.number("x", 0, 10, /*min_exclusive=*/true);
      }
    }
  }
  const auto s = rec.schema("t");
  EXPECT_EQ(s["required"], (nlohmann::ordered_json{"big", "n", "tiers"}));
  EXPECT_EQ(s["properties"]["n"], (nlohmann::ordered_json{{"type", "integer"}, {"minimum", 1}, {"maximum", 8}}));
  // The whole int64 range states no maximum (2^63 as a double is no int64: it once printed as -2^63).
  EXPECT_EQ(s["properties"]["big"], (nlohmann::ordered_json{{"type", "integer"}, {"minimum", 0}}));
  EXPECT_EQ(s["properties"]["opt"]["type"], "boolean");
  const auto& item = s["properties"]["tiers"]["items"];
  EXPECT_EQ(item["required"], (nlohmann::ordered_json{"r"}));
  EXPECT_EQ(item["additionalProperties"], false);
  EXPECT_EQ(item["properties"]["x"]["exclusiveMinimum"], 0.0);
}

// nlohmann/json keeps the last of two equal keys without a word; hzp's inputs refuse them.
TEST(ParseJson, DuplicateKeysAreRefusedAtAnyDepth) {
  EXPECT_EQ(error_of([] { (void)parse_json(R"({"a": 1, "a": 2})", "x.json"); }),
            "x.json: a: duplicate key (each key once per object)");
  EXPECT_EQ(error_of([] { (void)parse_json(R"({"a": {"b": 1, "c": [{"d": 1, "d": 1}]}})", "x.json"); }),
            "x.json: d: duplicate key (each key once per object)");
  // The same key in two objects, or in an object and its parent, is fine.
  EXPECT_NO_THROW((void)parse_json(R"({"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}]})", "x.json"));
  EXPECT_EQ(error_of([] { (void)parse_ordered_json(R"({"z": 1, "z": 2})", "s.json"); }),
            "s.json: z: duplicate key (each key once per object)");
}

TEST(ParseJson, SyntaxErrorNamesFile) {
  EXPECT_EQ(error_of([] { (void)parse_json("{\"a\": ", "x.json"); }).rfind("x.json: not valid JSON", 0), 0u);
}

}  // namespace
}  // namespace hzp::core
