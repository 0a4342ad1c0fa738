// The tools' number checks (issue 28): the range an error names, the value
// shortened, and a memory size below one byte refused rather than rounded to
// 0 (unlimited).
#include "base/flag_checks.h"

#include <gtest/gtest.h>

#include <string>

namespace pipecast {
namespace {

std::string Check(const CLI::Validator& check, std::string value) { return check(value); }

TEST(FlagChecks, IntRangeNamesTheRangeAsIntegers) {
  EXPECT_EQ(Check(IntRange(1), "0"), "'0' is not an integer from 1 to 2147483647");
  EXPECT_EQ(Check(IntRange(0, 3), "4"), "'4' is not an integer from 0 to 3");
  EXPECT_EQ(Check(IntRange(1), "1"), "");
  EXPECT_EQ(Check(IntRange(1), "2147483647"), "");
  EXPECT_NE(Check(IntRange(1), "2147483648"), "");
  EXPECT_NE(Check(IntRange(1), "1.5"), "");
  EXPECT_NE(Check(IntRange(1), ""), "");
  EXPECT_NE(Check(IntRange(1), "99999999999999999999999"), "");  // past int64: ERANGE
}

TEST(FlagChecks, ALongValueIsShownShortenedWithItsLength) {
  const std::string forty(40, '9');
  EXPECT_EQ(ShownValue(forty), "'" + forty + "'");
  EXPECT_EQ(ShownValue(forty + "9"), "'" + std::string(32, '9') + "...' (41 characters)");
  EXPECT_EQ(
      Check(IntRange(0), std::string(400, '9')),
      "'" + std::string(32, '9') + "...' (400 characters) is not an integer from 0 to 2147483647");
}

TEST(FlagChecks, AMemorySizeBelowOneByteIsRefusedNotUnlimited) {
  const CLI::Validator gib = MemorySize(kMaxMemoryGiB, "GiB", 1024.0 * 1024 * 1024, "unlimited");
  // One byte is 2^-30 GiB = 9.313e-10 GiB.
  EXPECT_EQ(Check(gib, "0"), "");
  EXPECT_EQ(Check(gib, "9.32e-10"), "");  // 1.0007 bytes
  EXPECT_EQ(Check(gib, "9.31e-10"),       // 0.9997 bytes
            "'9.31e-10' GiB is less than one byte: give 0 for unlimited, or a size of at least "
            "one byte (9.31e-10 GiB)");
  EXPECT_NE(Check(gib, "1e-300"), "");
  EXPECT_NE(Check(gib, "4.9e-324"), "");
  EXPECT_NE(Check(gib, "nan"), "");
  EXPECT_NE(Check(gib, "-1"), "");
}

}  // namespace
}  // namespace pipecast
