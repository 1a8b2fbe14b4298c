// PsClient against a forged phubd in the same process (tests/support/forged_phubd.h), for the
// ps_client_*_test.cc files: the test plays phubd's control plane and two server cores with raw
// sockets, reads every byte the real client sends and answers with WEIGHTS of its own choosing.
//
// The model: two tensors over two cores, 64-byte chunks (16 floats): w = chunks 0..2 (16, 16,
// 8 floats), b = chunks 3..4 (16, 4); chunk_owner {1, 0, 0, 1, 0}, so each tensor has chunks
// on both cores and each core chunks of both tensors. The client is a rank of 2.
//
// Every wait is bounded (kForgedStep, 5 s): the client runs on its own thread (PsClientThread)
// and is awaited with a deadline, and every read of the forged phubd has one. The deadlines only
// turn a hang into a failure; nothing measures time.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "phub/client/ps_client.h"
#include "phub/transport/wire_header.h"
#include "tests/support/forged_phubd.h"
#include "tests/support/ps_client_thread.h"

namespace phub::testing::ps_client_test {

using ::testing::AssertionFailure;
using ::testing::AssertionResult;
using ::testing::AssertionSuccess;
using transport::Op;
using transport::WireHeader;
using Call = PsClientThread::Call;
using Tensors = std::vector<std::vector<float>>;

inline const std::vector<keys::TensorSpec> kModel = {{"w", 40}, {"b", 20}};
inline const std::vector<keys::CoreIndex> kOwners = {1, 0, 0, 1, 0};
inline constexpr std::uint32_t kCores = 2;
inline constexpr std::uint32_t kChunks = 5;
inline constexpr std::uint32_t kW = 0;  // tensor indices
inline constexpr std::uint32_t kB = 1;

inline ForgedJob Job(std::uint32_t rank, bool weights_from_server = false) {
  ForgedJob job;
  job.model = kModel;
  job.chunk_bytes = 64;
  job.owners = kOwners;
  job.cores = kCores;
  job.rank = rank;
  job.world = 2;
  job.weights_from_server = weights_from_server;
  return job;
}

// The options of a client of the job, connecting to the forged phubd at `port`.
inline client::PsClientOptions Options(std::uint16_t port) {
  client::PsClientOptions options;
  options.port = port;
  options.connect_timeout_ms = 2000;
  return options;
}

// Random values for every tensor of the model, distinct per seed (so weights sent by the
// client, gradients and the forged phubd's WEIGHTS can never be mistaken for one another).
inline Tensors RandomTensors(std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensors out;
  for (const keys::TensorSpec& t : kModel) {
    std::vector<float>& v = out.emplace_back(t.elements);
    for (float& x : v) x = dist(rng);
  }
  return out;
}

class PsClientTest : public ::testing::Test {
 protected:
  // Starts the forged phubd and a client of rank `rank` whose weight buffers hold `weights`,
  // and takes the client through the handshake: Connect returns OK.
  void Start(std::uint32_t rank, Tensors weights, bool weights_from_server = false) {
    phubd_ = std::make_unique<ForgedPhubd>(Job(rank, weights_from_server));
    ASSERT_TRUE(phubd_->listening());
    client_ =
        std::make_unique<PsClientThread>(Options(phubd_->port()), Membership{rank, 2}, kModel,
                                         std::move(weights),
                                         [phubd = phubd_.get()] { phubd->CloseAll(); });
    const Call connect = client_->Connect();
    ASSERT_TRUE(phubd_->Handshake());
    ASSERT_TRUE(PsClientThread::Done(connect)) << "Connect still blocked after the handshake";
    ASSERT_TRUE(connect.get().ok()) << connect.get();
  }

  // What the client must send on each core for `tensors`: op, iteration and each chunk's
  // values taken from `values`. Reads as many messages from each core as it owns chunks of
  // those tensors and checks each against its chunk, in whatever order they come.
  AssertionResult ExpectChunks(Op op, std::uint64_t iteration,
                               const std::vector<std::uint32_t>& tensors, const Tensors& values) {
    const keys::KeyTable& table = phubd_->table();
    for (std::uint32_t core = 0; core < kCores; ++core) {
      std::map<std::uint32_t, const keys::Chunk*> expected;  // by chunk id
      for (std::uint32_t t : tensors) {
        for (const keys::Chunk& c : table.chunks_of_tensor(t)) {
          if (table.owner(c.id) == core) expected[c.id] = &c;
        }
      }
      while (!expected.empty()) {
        WireHeader header;
        std::vector<std::byte> payload;
        if (AssertionResult r = phubd_->Read(core, header, payload); !r) {
          return r << " (" << expected.size() << " chunks still expected there)";
        }
        auto it = expected.find(header.chunk);
        if (header.op != op || header.worker != phubd_->job().rank ||
            header.iteration != iteration || it == expected.end()) {
          return AssertionFailure()
                 << "core " << core << " got " << OpName(header.op) << " of worker "
                 << header.worker << " for chunk " << header.chunk << " iteration "
                 << header.iteration << "; expected " << OpName(op) << " of iteration " << iteration
                 << " for one of its " << expected.size() << " remaining chunks";
        }
        const keys::Chunk& c = *it->second;
        const auto want =
            std::as_bytes(std::span<const float>(values[c.tensor]).subspan(c.offset, c.elements));
        if (header.payload_bytes != want.size() || payload.size() != want.size() ||
            std::memcmp(payload.data(), want.data(), want.size()) != 0) {
          return AssertionFailure()
                 << OpName(op) << " of chunk " << c.id << " on core " << core
                 << " does not carry the chunk's " << want.size() << " bytes exactly";
        }
        expected.erase(it);
      }
    }
    return AssertionSuccess();
  }

  // WEIGHTS(k, iteration) of every chunk of tensor t, from `values`, each on its owner's
  // connection, last chunk first (landing order must not matter).
  AssertionResult SendWeights(std::uint32_t t, std::uint64_t iteration, const Tensors& values) {
    const auto chunks = phubd_->table().chunks_of_tensor(t);
    for (auto c = chunks.rbegin(); c != chunks.rend(); ++c) {
      if (!phubd_->SendWeights(c->id, iteration,
                               std::span<const float>(values[t]).subspan(c->offset, c->elements))) {
        return AssertionFailure() << "could not send WEIGHTS of chunk " << c->id;
      }
    }
    return AssertionSuccess();
  }

  // The client leaves: BYE on every data connection, then Goodbye{iterations} on the control
  // connection, Close is OK, and the client closes every connection.
  void ExpectCleanLeave(const Call& close, std::uint64_t iterations) {
    for (std::uint32_t core = 0; core < kCores; ++core) EXPECT_TRUE(phubd_->ExpectBye(core));
    EXPECT_TRUE(phubd_->ExpectGoodbye(iterations));
    ASSERT_TRUE(PsClientThread::Done(close)) << "Close still blocked";
    EXPECT_TRUE(close.get().ok()) << close.get();
    for (std::uint32_t core = 0; core < kCores; ++core) {
      EXPECT_TRUE(phubd_->DroppedByClient(core, kForgedStep)) << "core " << core;
    }
    EXPECT_TRUE(phubd_->ControlDroppedByClient(kForgedStep));
  }

  // Init answered by WEIGHTS(0) = `server` for every chunk: OK, and the buffers hold `server`.
  void InitWith(const Tensors& server) {
    const Call init = client_->Run([](client::PsClient& c) { return c.Init(); });
    for (std::uint32_t t = 0; t < kModel.size(); ++t) ASSERT_TRUE(SendWeights(t, 0, server));
    ASSERT_TRUE(PsClientThread::Done(init)) << "Init still blocked after every chunk's WEIGHTS";
    ASSERT_TRUE(init.get().ok()) << init.get();
    EXPECT_EQ(client_->weights(), server);
  }

  // A rank-1 client past Init with a Push of tensor t (iteration 1) in flight, whose PUSH
  // messages the forged phubd has read; push_ is that call.
  void StartWithAPushInFlight(std::uint32_t t) {
    ASSERT_NO_FATAL_FAILURE(Start(1, RandomTensors(1)));
    ASSERT_NO_FATAL_FAILURE(InitWith(RandomTensors(2)));
    const Tensors grads = RandomTensors(3);
    push_ = Push(t, client_->Hold(grads[t]));
    ASSERT_TRUE(ExpectChunks(Op::kPush, 1, {t}, grads));
    ASSERT_TRUE(PsClientThread::Done(push_));
    ASSERT_TRUE(push_.get().ok()) << push_.get();
  }

  Call Push(std::uint32_t t, std::span<const float> grads) {
    return client_->Run([t, grads](client::PsClient& c) { return c.Push(t, grads); });
  }
  Call Wait(std::uint32_t t) {
    return client_->Run([t](client::PsClient& c) { return c.Wait(t); });
  }

  // Declared in this order so that the client (whose destructor closes the forged phubd's
  // sockets to unblock it) goes first.
  std::unique_ptr<ForgedPhubd> phubd_;
  std::unique_ptr<PsClientThread> client_;
  Call push_;  // StartWithAPushInFlight's
};

}  // namespace phub::testing::ps_client_test
