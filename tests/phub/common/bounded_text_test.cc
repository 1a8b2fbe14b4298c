#include "phub/common/bounded_text.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>

namespace phub {
namespace {

bool AllPrintable(const std::string& s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) return false;
  }
  return true;
}

std::string RandomBytes(std::mt19937_64& rng, std::size_t max_size) {
  std::string s(rng() % (max_size + 1), '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

TEST(EscapedTest, ForgedLogLineAndAnsiEscapesComeOutAsPrintableEscapes) {
  EXPECT_EQ(Escaped("x\n[2026-11-27 00:00:00.000] [phubd] [info] forged", 200),
            "x\\n[2026-11-27 00:00:00.000] [phubd] [info] forged");
  EXPECT_EQ(Escaped("\x1b[31mred"), "\\x1b[31mred");
  EXPECT_EQ(Escaped("a\r\tb\x7f\xc3\xa9"), "a\\r\\tb\\x7f\\xc3\\xa9");
  EXPECT_EQ(Escaped("say \"hi\" it's a\\b"), "say \\\"hi\\\" it\\'s a\\\\b");
}

TEST(EscapedTest, PlainNamesPassUnchanged) {
  EXPECT_EQ(Escaped("resnet-team_1.v2"), "resnet-team_1.v2");
  EXPECT_EQ(Bounded("job 'a' said \"b\" c\\d"), "job 'a' said \"b\" c\\d");
}

TEST(EscapedTest, RandomBytesNeverLeaveAControlOrNonAsciiByte) {
  std::mt19937_64 rng(38);
  for (int i = 0; i < 20000; ++i) {
    const std::string in = RandomBytes(rng, 200);
    const std::size_t max = 1 + rng() % 100;
    const std::string e = Escaped(in, max), b = Bounded(in, max);
    ASSERT_TRUE(AllPrintable(e)) << e;
    ASSERT_TRUE(AllPrintable(b)) << b;
    // Bounded: at most max_bytes of escapes, then the "... (N bytes)" note.
    const std::string note = "... (" + std::to_string(in.size()) + " bytes)";
    ASSERT_LE(e.size(), max + note.size());
    ASSERT_LE(b.size(), max + note.size());
  }
}

TEST(EscapedTest, ReversibleForAnyBytesItKeepsWhole) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 20000; ++i) {
    const std::string in = RandomBytes(rng, 64);
    const std::string e = Escaped(in, 4 * 64);
    std::string back;
    ASSERT_TRUE(UnescapeText(e, back)) << e;
    ASSERT_EQ(back, in);
  }
}

TEST(EscapedTest, InjectiveOnPrintableInput) {
  // Every string of up to 3 characters from an alphabet with the characters that escape.
  const std::string alphabet = "a\\\"'nx\n";
  std::set<std::string> outputs;
  std::size_t inputs = 0;
  for (std::size_t len = 0; len <= 3; ++len) {
    std::size_t total = 1;
    for (std::size_t k = 0; k < len; ++k) total *= alphabet.size();
    for (std::size_t n = 0; n < total; ++n) {
      std::string s;
      for (std::size_t k = 0, m = n; k < len; ++k, m /= alphabet.size())
        s += alphabet[m % alphabet.size()];
      outputs.insert(Escaped(s));
      ++inputs;
    }
  }
  EXPECT_EQ(outputs.size(), inputs);
}

TEST(EscapedTest, BoundedIsIdempotentOnEscapedText) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 2000; ++i) {
    const std::string e = Escaped(RandomBytes(rng, 50), 1000);
    ASSERT_EQ(Bounded(e, 1000), e);
  }
}

TEST(EscapedTest, CutNamesTheLengthAndNeverSplitsAnEscape) {
  EXPECT_EQ(Escaped(std::string(300, 'z'), 4), "zzzz... (300 bytes)");
  EXPECT_EQ(Escaped("ab\x1b"
                    "cd",
                    4),
            "ab... (5 bytes)");
  EXPECT_EQ(Bounded(std::string(10, 'q'), 10), std::string(10, 'q'));
}

TEST(EscapedTest, UnescapeRefusesMalformedEscapes) {
  std::string out;
  EXPECT_FALSE(UnescapeText("a\\", out));
  EXPECT_FALSE(UnescapeText("\\q", out));
  EXPECT_FALSE(UnescapeText("\\x1", out));
  EXPECT_FALSE(UnescapeText("\\xZZ", out));
}

}  // namespace
}  // namespace phub
