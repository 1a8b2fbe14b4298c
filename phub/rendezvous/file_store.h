// The rendezvous through a directory every rank shares (a temp dir on one box, a shared
// filesystem on a cluster): a key is the file `<directory>/<key>`, its value the file's bytes.
// Writes go to `<key>.tmp` and are renamed, so a reader sees the whole value or no file.
//
// A file left by an earlier job (a crash before it was removed) is read as this job's value:
// give each job a fresh directory. Stateless apart from the path; safe to use from several
// threads and processes.
#pragma once

#include <string>

#include "phub/rendezvous/rendezvous.h"

namespace phub::rendezvous {

class FileStore final : public Store {
 public:
  explicit FileStore(std::string directory) : directory_(std::move(directory)) {}

  // InvalidArgument naming the file when it cannot be written or renamed (does the directory
  // exist, is it writable?).
  Status Publish(const std::string& key, const std::string& value) override;
  // Polls every 10 ms. DeadlineExceeded names the key and the file; InvalidArgument when the
  // file holds more than kMaxValueBytes (only that much plus one byte is read).
  StatusOr<std::string> Lookup(const std::string& key, int timeout_ms) override;
  Status Remove(const std::string& key) override;
  Status Finish() override { return absl::OkStatus(); }
  const std::string& address() const override { return directory_; }

  std::string PathOf(const std::string& key) const { return directory_ + "/" + key; }

 private:
  std::string directory_;
};

}  // namespace phub::rendezvous
