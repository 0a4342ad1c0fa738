#include "base/terminal_text.h"

#include <gtest/gtest.h>

namespace pipecast {
namespace {

// Issue 17: control characters in names reached the terminal as they were.
TEST(TerminalSafe, ControlCharactersInNamesAreEscaped) {
  EXPECT_EQ(TerminalSafe("attn\x1b[31mred"), "attn\\x1b[31mred");
  EXPECT_EQ(TerminalSafe("two\nlines\r\tand\x7f"), "two\\nlines\\r\\tand\\x7f");
  EXPECT_EQ(TerminalSafe(std::string_view("nul\0end", 7)), "nul\\x00end");
  // U+009B (CSI, a one-character ESC [) in UTF-8.
  EXPECT_EQ(TerminalSafe("a\xc2\x9b"
                         "31m"),
            "a\\u009b31m");
}

TEST(TerminalSafe, PrintableTextAndOtherUtf8AreKept) {
  EXPECT_EQ(TerminalSafe("layer 3 (MLP) – µ-batch ✓"), "layer 3 (MLP) – µ-batch ✓");
  EXPECT_EQ(TerminalSafe("\xc2\xa0"), "\xc2\xa0");            // U+00A0 is printable
  EXPECT_EQ(TerminalSafe("bad \xff utf8"), "bad \xff utf8");  // not ours to fix
  EXPECT_EQ(TerminalSafe("ends \xc2"), "ends \xc2");
}

TEST(TerminalSafe, LinesKeepTheirBreaksAndLoseTheirEscapes) {
  EXPECT_EQ(TerminalSafeLines("deadlock:\n  rank 0: \x1b]0;title\x07"),
            "deadlock:\n  rank 0: \\x1b]0;title\\x07");
}

TEST(Excerpt, KeepsFortyCharactersAndShortensLongerWithTheLength) {
  EXPECT_EQ(Excerpt("0B9X"), "0B9X");
  EXPECT_EQ(Excerpt(std::string(40, '7')), std::string(40, '7'));
  EXPECT_EQ(Excerpt(std::string(10000199, '7')),
            std::string(32, '7') + "... (10000199 characters)");
}

}  // namespace
}  // namespace pipecast
