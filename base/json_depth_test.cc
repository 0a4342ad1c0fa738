#include "base/json_depth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace pipecast {
namespace {

using ::testing::HasSubstr;

TEST(JsonTooDeep, CountsOpenArraysAndObjects) {
  // Given 3 levels and a limit of 3: fine; a limit of 2: the third opening
  // bracket, byte 8, is one too many.
  const std::string text = R"({"a": [{"b": 1}]})";
  EXPECT_FALSE(JsonTooDeep(text, 3).has_value());
  ASSERT_TRUE(JsonTooDeep(text, 2).has_value());
  EXPECT_THAT(*JsonTooDeep(text, 2), HasSubstr("nested deeper than 2 levels at byte 8"));
}

TEST(JsonTooDeep, BracketsInsideStringsDoNotCount) {
  EXPECT_FALSE(JsonTooDeep(R"({"name": "[[[[{{{{\"[[["})", 1).has_value());
}

TEST(JsonTooDeep, AHundredThousandLevelsAreRefusedBeforeAnyParse) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  ASSERT_TRUE(JsonTooDeep(deep).has_value());
  EXPECT_THAT(*JsonTooDeep(deep), HasSubstr("deeper than 64 levels at byte 65"));
  EXPECT_FALSE(JsonTooDeep(std::string(64, '[') + std::string(64, ']')).has_value());
}

}  // namespace
}  // namespace pipecast
