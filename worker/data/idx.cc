#include "worker/data/idx.h"

#include <zlib.h>

#include <memory>

#include "absl/strings/str_cat.h"

namespace phub::worker::data {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

// Reads exactly n bytes; false on a short read or an error.
bool ReadAll(gzFile f, void* to, std::size_t n) {
  auto* p = static_cast<unsigned char*>(to);
  while (n > 0) {
    const unsigned step = static_cast<unsigned>(std::min<std::size_t>(n, 1u << 30));
    const int got = gzread(f, p, step);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

}  // namespace

StatusOr<IdxArray> ReadIdx(const std::string& path) {
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  if (!f) return absl::NotFoundError(absl::StrCat(path, ": cannot open (missing or unreadable)"));
  unsigned char magic[4];
  if (!ReadAll(f.get(), magic, 4) || magic[0] != 0 || magic[1] != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not an IDX file (the first two bytes must be zero)"));
  }
  if (magic[2] != 0x08) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": IDX element type 0x", absl::Hex(magic[2]), ", only unsigned bytes (0x08) are read"));
  }
  IdxArray a;
  std::size_t count = 1;
  for (int d = 0; d < magic[3]; ++d) {
    unsigned char b[4];
    if (!ReadAll(f.get(), b, 4)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": header cut short at dimension ", d));
    }
    a.dims.push_back((std::uint32_t{b[0]} << 24) | (b[1] << 16) | (b[2] << 8) | b[3]);
    count *= a.dims.back();
  }
  if (a.dims.empty() || count == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": IDX file with no elements"));
  }
  a.values.resize(count);
  if (!ReadAll(f.get(), a.values.data(), count)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cut short: the header promises ",
                                                   count, " bytes of data (corrupt download?)"));
  }
  return a;
}

}  // namespace phub::worker::data
