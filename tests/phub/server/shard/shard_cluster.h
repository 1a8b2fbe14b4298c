// Both server cores of the harness's job (shard_harness.h) with every worker connected to each,
// for the tests that follow chunks across cores: recovery (shard_recovery_test.cc) and
// determinism (shard_determinism_test.cc). The workers are raw sockets driven from the test's
// thread (or, for one rank at a time, from a thread of the test's); every wait is bounded.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "tests/phub/server/shard/shard_harness.h"

namespace phub::server::shard_test {

using Weights = std::map<std::uint32_t, std::vector<float>>;  // by chunk id

class ShardCluster {
 public:
  explicit ShardCluster(std::shared_ptr<const JobSpec> job)
      : job_(std::move(job)), sockets_(job_->world_size), expected_in_(job_->table.num_cores(), 0) {
    for (std::uint32_t c = 0; c < job_->table.num_cores(); ++c) {
      cores_.push_back(std::make_unique<ShardOnLoop>(job_, c));
    }
  }

  const keys::KeyTable& table() const { return job_->table; }
  std::uint32_t num_cores() const { return static_cast<std::uint32_t>(cores_.size()); }
  ShardOnLoop& core(std::uint32_t c) { return *cores_[c]; }
  RawSocket& socket(std::uint32_t rank, std::uint32_t core) { return sockets_[rank][core]; }
  std::vector<std::uint32_t> AllChunks() const {
    std::vector<std::uint32_t> all;
    for (const keys::Chunk& c : table().chunks()) all.push_back(c.id);
    return all;
  }

  // `rank` opens a connection to every core and ATTACHes (replacing any sockets it had).
  void Attach(std::uint32_t rank) {
    sockets_[rank].clear();
    for (auto& core : cores_) sockets_[rank].push_back(Attached(*core, rank));
  }
  // Every rank attaches to every core, which then reports kAllAttached.
  void AttachAll() {
    for (std::uint32_t r = 0; r < job_->world_size; ++r) Attach(r);
    for (auto& core : cores_) {
      ASSERT_TRUE(core->AwaitEvent(ShardEvent::Kind::kAllAttached)) << "core " << core->core();
    }
  }
  // Rank 0 sends INIT of every chunk from `initial`; every worker reads WEIGHTS(k, 0) of every
  // chunk, equal to the INIT byte for byte.
  void Init(const Tensors& initial) {
    for (const keys::Chunk& c : table().chunks()) {
      ASSERT_TRUE(SendChunk(socket(0, table().owner(c.id)), transport::Op::kInit, 0, c, 0,
                            ChunkOf(initial, c)));
      expected_in_[table().owner(c.id)] += c.bytes();
    }
    for (std::uint32_t r = 0; r < job_->world_size; ++r) {
      const Weights got = Read(r, AllChunks(), 0);
      ASSERT_EQ(got.size(), table().chunks().size());
      for (const auto& [k, values] : got) {
        const auto want = ChunkOf(initial, table().chunks()[k]);
        ASSERT_TRUE(std::equal(values.begin(), values.end(), want.begin(), want.end()))
            << "rank " << r << ": WEIGHTS(" << k << ", 0) are not the INIT";
      }
    }
  }
  // PUSH(chunk, iteration) from `rank`, the chunk's part of `grads`, to the chunk's owner.
  bool Push(std::uint32_t rank, std::uint32_t chunk, std::uint64_t iteration,
            const Tensors& grads) {
    const keys::Chunk& c = table().chunks()[chunk];
    expected_in_[table().owner(chunk)] += c.bytes();
    return SendChunk(socket(rank, table().owner(chunk)), transport::Op::kPush, rank, c, iteration,
                     ChunkOf(grads, c));
  }
  // A push the shard will refuse (it counts no bytes).
  bool PushRefused(std::uint32_t rank, std::uint32_t chunk, std::uint64_t iteration,
                   const Tensors& grads) {
    const keys::Chunk& c = table().chunks()[chunk];
    return SendChunk(socket(rank, table().owner(chunk)), transport::Op::kPush, rank, c, iteration,
                     ChunkOf(grads, c));
  }
  // Every rank pushes every chunk for `iteration` (rank by rank) and reads all the WEIGHTS.
  std::vector<Weights> Iterate(std::uint64_t iteration, const std::vector<Tensors>& grads) {
    for (std::uint32_t r = 0; r < job_->world_size; ++r) {
      for (const keys::Chunk& c : table().chunks()) {
        EXPECT_TRUE(Push(r, c.id, iteration, grads[r]));
      }
    }
    std::vector<Weights> got;
    for (std::uint32_t r = 0; r < job_->world_size; ++r)
      got.push_back(Read(r, AllChunks(), iteration));
    return got;
  }
  // Whether every core has taken in every byte pushed (or INIT) so far, within kStep.
  bool AllReceived() {
    for (std::uint32_t c = 0; c < num_cores(); ++c) {
      const std::uint64_t want = expected_in_[c];
      if (!core(c).Eventually([&](Shard& s) { return s.stats().bytes_in == want; })) {
        ADD_FAILURE() << "core " << c << " took in " << core(c).stats().bytes_in << " bytes, not "
                      << want;
        return false;
      }
    }
    return true;
  }
  // WEIGHTS(k, iteration) for `rank` of every chunk in `chunks`, each read from its owner's
  // connection (any order there); a failure (ADD_FAILURE) names what came instead.
  Weights Read(std::uint32_t rank, const std::vector<std::uint32_t>& chunks,
               std::uint64_t iteration) {
    Weights all;
    for (std::uint32_t c = 0; c < num_cores(); ++c) {
      std::vector<std::uint32_t> here;
      for (std::uint32_t k : chunks) {
        if (table().owner(k) == c) here.push_back(k);
      }
      if (here.empty()) continue;
      Weights got = ReadWeights(socket(rank, c), rank, here, iteration, table());
      all.merge(got);
    }
    return all;
  }
  // Every chunk of every core as the shards hold it now (Shard::SnapshotNow), by chunk id.
  std::map<std::uint32_t, ChunkSnapshot> Snapshot() {
    std::map<std::uint32_t, ChunkSnapshot> all;
    for (auto& core : cores_) {
      core->OnLoop([&](Shard& s) {
        for (ChunkSnapshot& c : s.SnapshotNow()) all[c.chunk] = std::move(c);
      });
    }
    return all;
  }

 private:
  std::shared_ptr<const JobSpec> job_;
  std::vector<std::unique_ptr<ShardOnLoop>> cores_;
  std::vector<std::vector<RawSocket>> sockets_;  // [rank][core]
  std::vector<std::uint64_t> expected_in_;       // by core: payload bytes pushed to it
};

// The first event of `kind` on `core` whose reason contains `text`, waiting up to kStep.
inline std::optional<ShardEvent> AwaitEventSaying(ShardOnLoop& core, ShardEvent::Kind kind,
                                                  const std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + kStep;
  while (true) {
    for (const ShardEvent& e : core.events()) {
      if (e.kind == kind && e.reason.find(text) != std::string::npos) return e;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(Millis(2));
  }
}

// Whether two float arrays hold the same bits.
inline bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace phub::server::shard_test
