// The Hello's token proof: HMAC-SHA256 keyed by the token over a documented message, checked
// against answers computed independently (Python's hmac module), and its verdicts.
#include "phub/common/token_proof.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>

namespace phub {
namespace {

std::string Hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

std::string Nonce0To31() {
  std::string nonce;
  for (int i = 0; i < 32; ++i) nonce.push_back(static_cast<char>(i));
  return nonce;
}

// hmac.new(b"s3cret", b"phub hello v4\0" + struct.pack("<I", 32) + bytes(range(32)) + JOB,
//          hashlib.sha256).hexdigest(), computed in Python: the layout docs/protocol.md states.
TEST(TokenProofTest, IsTheDocumentedHmacSha256) {
  EXPECT_EQ(Hex(TokenProof("s3cret", Nonce0To31(), "tenant-a")),
            "cd6d3a2fa16d299625f6cda8ad42da073d70902243d73253f49a3198b70361e0");
  EXPECT_EQ(Hex(TokenProof("s3cret", Nonce0To31(), "")),
            "c31364bd35131575f166298616bb7cab7b40d2539bd5ca7d047bec1d89c16de1");
}

TEST(TokenProofTest, NoTokenNoProof) {
  EXPECT_EQ(TokenProof("", Nonce0To31(), "a"), "");
  EXPECT_TRUE(ProofMatches("", "", Nonce0To31(), "a"));
  EXPECT_FALSE(ProofMatches(TokenProof("x", Nonce0To31(), "a"), "", Nonce0To31(), "a"));
  EXPECT_FALSE(ProofMatches("", "x", Nonce0To31(), "a"));
}

// On random tokens, nonces and jobs: the proof of the right token passes; a change to any of
// token, nonce or job, or to one bit of the proof, fails.
TEST(TokenProofTest, PassesOnlyTheRightTokenForThisNonceAndJob) {
  std::mt19937 rng(7);
  auto bytes = [&](std::size_t n) {
    std::string s(n, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    return s;
  };
  for (int trial = 0; trial < 200; ++trial) {
    const std::string token = bytes(1 + rng() % 64), nonce = *NewChallengeNonce(),
                      job = bytes(rng() % 64);
    const std::string proof = TokenProof(token, nonce, job);
    ASSERT_EQ(proof.size(), kTokenProofBytes);
    EXPECT_TRUE(ProofMatches(proof, token, nonce, job));
    EXPECT_FALSE(ProofMatches(proof, token + "x", nonce, job));
    EXPECT_FALSE(ProofMatches(proof, token, *NewChallengeNonce(), job));
    EXPECT_FALSE(ProofMatches(proof, token, nonce, job + "x"));
    std::string flipped = proof;
    flipped[rng() % flipped.size()] ^= static_cast<char>(1 << (rng() % 8));
    EXPECT_FALSE(ProofMatches(flipped, token, nonce, job));
    EXPECT_FALSE(ProofMatches(proof.substr(0, 31), token, nonce, job));
  }
}

TEST(TokenProofTest, NoncesAreFreshEachTime) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    StatusOr<std::string> nonce = NewChallengeNonce();
    ASSERT_TRUE(nonce.ok()) << nonce.status();
    ASSERT_EQ(nonce->size(), kChallengeNonceBytes);
    EXPECT_TRUE(seen.insert(*nonce).second);
  }
}

}  // namespace
}  // namespace phub
