// The job token never travels: phubd sends each control connection a fresh random nonce (the
// Challenge), and the worker answers with an HMAC-SHA256 of the nonce and its job's name keyed
// by the token (the Hello's token_proof). A listener on the network learns a proof good for one
// connection that no longer exists, never the token; a replayed Hello meets a new nonce.
//
// OpenSSL's libcrypto does the cryptography (RAND_bytes, HMAC, CRYPTO_memcmp): the one thing
// that must never be hand-written. docs/design.md "Authentication" says why this shape.
#pragma once

#include <cstddef>
#include <string>

#include "phub/common/status.h"

namespace phub {

inline constexpr std::size_t kChallengeNonceBytes = 32;
inline constexpr std::size_t kTokenProofBytes = 32;  // SHA-256

// kChallengeNonceBytes from the operating system's CSPRNG; Internal if it has none to give.
StatusOr<std::string> NewChallengeNonce();

// What a worker holding `token` answers the Challenge `nonce` with, for the job `job` (the
// Hello's name, as sent: empty for "default"). No token: no proof (the empty string).
std::string TokenProof(const std::string& token, const std::string& nonce, const std::string& job);

// Whether `proof` is what a worker with `expected_token` would answer: in time independent of
// where they differ (a peer timing refusals learns nothing of the token). With no token
// expected, only the empty proof passes.
bool ProofMatches(const std::string& proof, const std::string& expected_token,
                  const std::string& nonce, const std::string& job);

}  // namespace phub
