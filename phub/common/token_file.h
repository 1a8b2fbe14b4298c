// Job token files: phubd's --token-file and its per-job files (--job-tokens), a worker's
// --token-file and the Python package's PHUB_TOKEN_FILE are all read by ReadTokenFile, so one
// file means one token to every reader (they used to trim it differently: a file ending in a
// space gave phubd and the worker different tokens, and a refused Hello nobody could explain).
#pragma once

#include <cstddef>
#include <string>

#include "phub/common/status.h"

namespace phub {

// A token file larger than this is not a token (and is not read whole).
inline constexpr std::size_t kMaxTokenFileBytes = 4096;

// The token a file holds: its contents without trailing ASCII whitespace (space, tab, CR, LF,
// VT, FF). Why trailing whitespace and all of it: editors and `echo secret > f` add a line end
// (LF, or CRLF on Windows), and a stray space or tab at the end is as invisible in a terminal;
// a token that differs only there from what the operator sees is never what they meant.
// Leading and inner bytes are kept: they are visible, and tokens may be any bytes.
std::string TrimToken(std::string text);

// Reads and trims the token file at `path`. Errors name the file and the fix:
//   NotFound            the file cannot be opened;
//   FailedPrecondition  it is over kMaxTokenFileBytes (not a token file);
//   InvalidArgument     it holds no token (empty, or whitespace only): an empty token would
//                       let any worker without one join, so it is refused rather than taken;
//   DataLoss            reading it failed midway.
// Blocks on the file system only; thread-safe.
StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace phub
