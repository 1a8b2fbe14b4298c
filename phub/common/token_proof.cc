#include "phub/common/token_proof.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdint>

namespace phub {
namespace {

// Domain separation: a proof is of this protocol's Hello and nothing else keyed by the token.
constexpr char kContext[] = "phub hello v4";

}  // namespace

StatusOr<std::string> NewChallengeNonce() {
  std::string nonce(kChallengeNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(nonce.size())) !=
      1) {
    return absl::InternalError(
        "the system's random generator gave no bytes for a Challenge (OpenSSL RAND_bytes): check "
        "/dev/urandom and getrandom(2)");
  }
  return nonce;
}

std::string TokenProof(const std::string& token, const std::string& nonce, const std::string& job) {
  if (token.empty()) return {};
  // context \0 nonce-length nonce job: every field delimited, so no two inputs collide.
  std::string message(kContext, sizeof(kContext));  // with its \0
  const auto nonce_bytes = static_cast<std::uint32_t>(nonce.size());
  for (int shift = 0; shift < 32; shift += 8) {
    message.push_back(static_cast<char>((nonce_bytes >> shift) & 0xff));
  }
  message += nonce;
  message += job;
  std::string proof(EVP_MAX_MD_SIZE, '\0');
  unsigned int length = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(),
       reinterpret_cast<unsigned char*>(proof.data()), &length);
  proof.resize(length);
  return proof;
}

bool ProofMatches(const std::string& proof, const std::string& expected_token,
                  const std::string& nonce, const std::string& job) {
  if (expected_token.empty()) return proof.empty();
  const std::string expected = TokenProof(expected_token, nonce, job);
  // The lengths are public (always kTokenProofBytes for a real worker).
  return proof.size() == expected.size() &&
         CRYPTO_memcmp(proof.data(), expected.data(), expected.size()) == 0;
}

}  // namespace phub
