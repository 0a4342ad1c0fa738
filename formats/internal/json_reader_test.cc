#include "formats/internal/json_reader.h"

#include <gtest/gtest.h>

#include <string>

namespace pipecast::internal {
namespace {

// A reader of each wording over `text`, and the message of the first failing read.
struct World {
  explicit World(const JsonWording& wording, const std::string& origin = "f.json")
      : reader(origin, wording) {}
  std::string Message(const Status& st) const { return st.ok() ? "ok" : st.message(); }
  JsonReader reader;
  Json root;
};

TEST(JsonReader, PathsAndShownValues) {
  EXPECT_EQ(Member("", "name"), "name");
  EXPECT_EQ(Member(Element("layers", 3), "forward_us"), "layers[3].forward_us");
  EXPECT_EQ(Shown(Json("12")), "string \"12\"");
  EXPECT_EQ(Shown(Json::object()), "an object");
  EXPECT_EQ(Shown(Json(std::string(50, 'x'))), "string \"" + std::string(39, 'x') + "...");
  EXPECT_EQ(WithoutExceptionId("[json.exception.parse_error.101] parse error"), "parse error");
}

TEST(JsonReader, ParseNamesTheRepeatedKey) {
  World w(kModelWording);
  EXPECT_EQ(w.Message(w.reader.Parse(R"({"layers": [{"a": 1}, {"a": 1, "a": 2}]})", &w.root)),
            "f.json: layers[1].a: key appears twice in the same object; keep one");
  EXPECT_EQ(w.Message(w.reader.Parse("{", &w.root)).rfind("f.json: not valid JSON at byte 2: ", 0),
            0u);
}

TEST(JsonReader, ModelWordingSuggestsAndSaysWhatToAdd) {
  World w(kModelWording, "");
  ASSERT_TRUE(w.reader.Parse(R"({"forward": 1, "n": -1, "big": 5e9, "s": 3})", &w.root).ok());
  EXPECT_EQ(w.Message(w.reader.CheckKeys(w.root, "", {"forward_us", "n", "big", "s"})),
            "forward: unknown key (did you mean 'forward_us'?); known keys here: forward_us, n, "
            "big, s");
  int n = 0;
  const IntRule rule{0, 100, "100", "a count"};
  EXPECT_EQ(w.Message(w.reader.Integer(w.root, "", "n", rule, &n)),
            "n: must be an integer >= 0, got -1");
  EXPECT_EQ(w.Message(w.reader.Integer(w.root, "", "big", rule, &n)),
            "big: 5000000000.0 is over the limit of 100; expected a count: check the unit");
  EXPECT_EQ(w.Message(w.reader.Integer(w.root, "", "gone", rule, &n)),
            "gone: missing; add a count (see docs/formats.md)");
  std::string s;
  EXPECT_EQ(w.Message(w.reader.String(w.root, "", "s", "a name", &s)),
            "s: must be a string, got 3");
}

TEST(JsonReader, PlanWordingIsTerseAndAlwaysNamesTheOrigin) {
  World w(kPlanWording, "");
  ASSERT_TRUE(
      w.reader.Parse(R"({"forward": 1, "n": -1, "big": 5e9, "o": 1, "x": 2})", &w.root).ok());
  EXPECT_EQ(w.Message(w.reader.CheckKeys(w.root, "", {"forward_us", "n", "big", "o", "x"})),
            ": forward: unknown key; known keys here: forward_us, n, big, o, x");
  int n = 0;
  EXPECT_EQ(w.Message(w.reader.Int(w.root, "", "n", 0, 100, &n)),
            ": n: expected an integer >= 0, got -1");
  EXPECT_EQ(w.Message(w.reader.Int(w.root, "", "big", 0, 100, &n)),
            ": big: 5000000000.0 is over the limit of 100");
  EXPECT_EQ(w.Message(w.reader.Int(w.root, "", "gone", 0, 100, &n)), ": gone: missing");
  EXPECT_EQ(w.Message(w.reader.CheckObject(w.root["o"], "o")),
            ": o: expected an object {...}, got 1");
  double d = 0;
  EXPECT_EQ(w.Message(w.reader.Number(w.root, "", "x", 1.0, &d)), ": x: 2 is over the limit of 1");
  const Json* list = nullptr;
  EXPECT_EQ(w.Message(w.reader.Array(w.root, "", "x", &list)), ": x: expected a list [...], got 2");
}

}  // namespace
}  // namespace pipecast::internal
