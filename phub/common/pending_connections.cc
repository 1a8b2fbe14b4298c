#include "phub/common/pending_connections.h"

namespace phub {

PendingConnections::Admission PendingConnections::Admit(const std::string& source,
                                                        std::uint64_t id) {
  Admission admission;
  if (of_source(source) >= limits_.per_source) return admission;
  if (limits_.total > 0 && by_id_.size() >= limits_.total) {
    admission.evict = by_id_.begin()->first;
    Done(*admission.evict);
  }
  ++per_source_[source];
  by_id_.emplace(id, source);
  admission.admitted = true;
  return admission;
}

void PendingConnections::Done(std::uint64_t id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  auto source = per_source_.find(it->second);
  if (source != per_source_.end() && --source->second == 0) per_source_.erase(source);
  by_id_.erase(it);
}

std::uint32_t PendingConnections::of_source(const std::string& source) const {
  auto it = per_source_.find(source);
  return it == per_source_.end() ? 0 : it->second;
}

}  // namespace phub
