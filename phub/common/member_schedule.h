// MemberSchedule: who the members of an elastic job are at each iteration (docs/design.md
// "Elastic jobs"). phubd decides it, one change at a time, each from an iteration on; its
// shards sum a chunk's iteration t over the members of t, and every worker learns the same
// schedule (proto Membership) so that it shards iteration t's data by its place among t's
// members. One class on both sides, so that the rule is written once.
//
// Entries are (from_iteration, ranks ascending); an entry covers iterations from its
// from_iteration up to the next entry's. An entry added at or before the last one's
// from_iteration replaces the entries from there on (a change decided again before any chunk
// reached it). Not thread-safe: each owner guards its own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <vector>

namespace phub {

// Where one worker stands in one iteration.
struct IterationMembers {
  bool member = false;        // the worker is one of the iteration's members
  std::uint32_t index = 0;    // its place among them (ranks ascending), when it is
  std::uint32_t world = 0;    // how many members the iteration has
  // Sum of the member counts of every iteration before this one (from iteration 1): batches
  // taken by the whole job so far, the data loader's position.
  std::uint64_t member_iterations_before = 0;
};

class MemberSchedule {
 public:
  struct Entry {
    std::vector<std::uint32_t> ranks;  // ascending, unique
    std::uint64_t member_iterations_before = 0;  // of its from_iteration
  };

  // The first entry: `ranks` from `from_iteration` on, with `before` member-iterations before.
  void Reset(std::uint64_t from_iteration, std::vector<std::uint32_t> ranks,
             std::uint64_t before) {
    entries_.clear();
    std::sort(ranks.begin(), ranks.end());
    entries_[from_iteration] = Entry{std::move(ranks), before};
  }

  // `ranks` from `from_iteration` on (entries at or after it are replaced). REQUIRES: an entry
  // at or before from_iteration exists (Reset first).
  void Change(std::uint64_t from_iteration, std::vector<std::uint32_t> ranks) {
    entries_.erase(entries_.lower_bound(from_iteration), entries_.end());
    std::sort(ranks.begin(), ranks.end());
    const std::uint64_t before = MemberIterationsBefore(from_iteration);
    entries_[from_iteration] = Entry{std::move(ranks), before};
  }
  // As the worker hears it: the entry as phubd computed it.
  void Set(std::uint64_t from_iteration, std::vector<std::uint32_t> ranks, std::uint64_t before) {
    entries_.erase(entries_.lower_bound(from_iteration), entries_.end());
    std::sort(ranks.begin(), ranks.end());
    entries_[from_iteration] = Entry{std::move(ranks), before};
  }

  bool empty() const { return entries_.empty(); }
  // The entry covering `iteration`, or null before the first.
  const Entry* At(std::uint64_t iteration) const {
    auto it = entries_.upper_bound(iteration);
    if (it == entries_.begin()) return nullptr;
    return &std::prev(it)->second;
  }
  std::uint64_t FromOf(std::uint64_t iteration) const {
    auto it = entries_.upper_bound(iteration);
    return it == entries_.begin() ? 0 : std::prev(it)->first;
  }
  const Entry& Latest() const { return entries_.rbegin()->second; }
  std::uint64_t LatestFrom() const { return entries_.rbegin()->first; }

  bool Contains(std::uint64_t iteration, std::uint32_t rank) const {
    const Entry* e = At(iteration);
    return e != nullptr && std::binary_search(e->ranks.begin(), e->ranks.end(), rank);
  }
  std::uint64_t MemberIterationsBefore(std::uint64_t iteration) const {
    auto it = entries_.upper_bound(iteration);
    if (it == entries_.begin()) return 0;
    --it;
    return it->second.member_iterations_before +
           (iteration - it->first) * it->second.ranks.size();
  }
  IterationMembers Of(std::uint64_t iteration, std::uint32_t rank) const {
    IterationMembers m;
    const Entry* e = At(iteration);
    if (e == nullptr) return m;
    m.world = static_cast<std::uint32_t>(e->ranks.size());
    m.member_iterations_before = MemberIterationsBefore(iteration);
    auto pos = std::lower_bound(e->ranks.begin(), e->ranks.end(), rank);
    m.member = pos != e->ranks.end() && *pos == rank;
    m.index = static_cast<std::uint32_t>(pos - e->ranks.begin());
    return m;
  }
  // Entries that end before `iteration` are not needed again.
  void ForgetBefore(std::uint64_t iteration) {
    auto it = entries_.upper_bound(iteration);
    if (it == entries_.begin()) return;
    entries_.erase(entries_.begin(), std::prev(it));
  }

 private:
  std::map<std::uint64_t, Entry> entries_;
};

}  // namespace phub
