#include "tests/support/forged_phubd.h"

#include <utility>

#include "phub/common/token_proof.h"
#include "phub/common/version.h"

namespace phub::testing {

using ::testing::AssertionFailure;
using ::testing::AssertionResult;
using ::testing::AssertionSuccess;
using transport::Op;
using transport::WireHeader;

keys::KeyTable ForgedJob::Table() const {
  auto table = keys::KeyTable::WithPlacement(model, chunk_bytes, cores, owners);
  EXPECT_TRUE(table.ok()) << "the forged job does not fit its own model: " << table.status();
  return *std::move(table);
}

ForgedPhubd::ForgedPhubd(ForgedJob job)
    : job_(std::move(job)),
      table_(job_.Table()),
      control_listener_(RawListener::Listen()),
      data_(job_.cores) {
  for (std::uint32_t c = 0; c < job_.cores; ++c) data_listeners_.push_back(RawListener::Listen());
}

bool ForgedPhubd::listening() const {
  bool all = control_listener_.listening();
  for (const RawListener& l : data_listeners_) all = all && l.listening();
  return all;
}

proto::Welcome ForgedPhubd::MakeWelcome() const {
  proto::Welcome welcome;
  welcome.set_protocol_version(kProtocolVersion);
  welcome.set_chunk_bytes(job_.chunk_bytes);
  for (keys::CoreIndex owner : job_.owners) welcome.add_chunk_owner(owner);
  for (std::uint32_t c = 0; c < job_.cores; ++c) {
    proto::CoreEndpoint& core = *welcome.add_cores();
    core.set_server(0);
    core.set_core(c);
    core.set_host("127.0.0.1");
    core.set_port(data_listeners_[c].port());
  }
  welcome.set_session(job_.session);
  welcome.set_weights_from_server(job_.weights_from_server);
  welcome.set_optimizer("forged");
  welcome.set_transport("tcp");
  return welcome;
}

AssertionResult ForgedPhubd::AcceptHello() {
  control_ = control_listener_.Accept(kForgedStep);
  if (!control_.connected()) return AssertionFailure() << "PsClient did not connect within 5 s";
  // As phubd does: a Challenge first (this phubd takes any token proof).
  proto::ControlMessage challenge;
  challenge.mutable_challenge()->set_nonce(std::string(kChallengeNonceBytes, 'n'));
  if (!control_.SendMessage(challenge)) return AssertionFailure() << "could not send a Challenge";
  proto::ControlMessage message;
  const RawSocket::Read read = control_.ReadMessage(message, kForgedStep);
  if (read != RawSocket::Read::kOk) return AssertionFailure() << "no Hello: " << read;
  const proto::Hello& hello = message.hello();
  bool as_expected = message.has_hello() && hello.protocol_version() == kProtocolVersion &&
                     hello.rank() == job_.rank && hello.world_size() == job_.world &&
                     hello.tensors_size() == static_cast<int>(job_.model.size());
  for (int t = 0; as_expected && t < hello.tensors_size(); ++t) {
    as_expected = hello.tensors(t).name() == job_.model[t].name &&
                  hello.tensors(t).elements() == job_.model[t].elements;
  }
  if (!as_expected) {
    return AssertionFailure() << "not the Hello PsClient should send: "
                              << message.ShortDebugString();
  }
  return AssertionSuccess();
}

AssertionResult ForgedPhubd::Reply(const proto::ControlMessage& reply) {
  if (!control_.SendMessage(reply)) return AssertionFailure() << "could not answer the Hello";
  return AssertionSuccess();
}

AssertionResult ForgedPhubd::SendWelcome(const proto::Welcome& welcome) {
  proto::ControlMessage message;
  *message.mutable_welcome() = welcome;
  return Reply(message);
}

AssertionResult ForgedPhubd::AcceptAttach(std::uint32_t core) {
  data_[core] = data_listeners_[core].Accept(kForgedStep);
  if (!data_[core].connected()) {
    return AssertionFailure() << "PsClient did not open core " << core << "'s data connection";
  }
  transport::EncodedHeader bytes;
  const RawSocket::Read got = data_[core].ReadExact(bytes, kForgedStep);
  if (got != RawSocket::Read::kOk) {
    return AssertionFailure() << "no ATTACH on core " << core << ": " << got;
  }
  auto attach = transport::DecodeWireHeader(bytes);
  if (!attach.ok()) return AssertionFailure() << "core " << core << ": " << attach.status();
  if (attach->op != Op::kAttach || attach->worker != job_.rank || attach->chunk != core ||
      attach->iteration != job_.session || attach->payload_bytes != 0) {
    return AssertionFailure() << "core " << core << " got " << OpName(attach->op) << " worker "
                              << attach->worker << " chunk " << attach->chunk << " iteration "
                              << attach->iteration << ", not the ATTACH";
  }
  return AssertionSuccess();
}

AssertionResult ForgedPhubd::Handshake() { return Handshake(MakeWelcome()); }

AssertionResult ForgedPhubd::Handshake(const proto::Welcome& welcome) {
  if (AssertionResult r = AcceptHello(); !r) return r;
  if (AssertionResult r = SendWelcome(welcome); !r) return r;
  for (std::uint32_t c = 0; c < job_.cores; ++c) {
    if (AssertionResult r = AcceptAttach(c); !r) return r;
  }
  return AssertionSuccess();
}

bool ForgedPhubd::Send(std::uint32_t core, const WireHeader& header,
                       std::span<const std::byte> payload) {
  return data_[core].SendWire(transport::EncodeWireHeader(header), payload);
}

bool ForgedPhubd::SendWeights(std::uint32_t chunk, std::uint64_t iteration,
                              std::span<const float> values) {
  const auto bytes = std::as_bytes(values);
  return Send(table_.owner(chunk),
              {Op::kWeights, job_.rank, chunk, iteration, static_cast<std::uint32_t>(bytes.size())},
              bytes);
}

AssertionResult ForgedPhubd::Read(std::uint32_t core, WireHeader& header,
                                  std::vector<std::byte>& payload) {
  const RawSocket::Read got = data_[core].ReadWire(header, payload, kForgedStep);
  if (got != RawSocket::Read::kOk) {
    return AssertionFailure() << "no message from the client on core " << core << ": " << got;
  }
  return AssertionSuccess();
}

bool ForgedPhubd::DroppedByClient(std::uint32_t core, Millis timeout) {
  return data_[core].WaitClosed(timeout);
}

bool ForgedPhubd::DataConnectionPending(std::uint32_t core) {
  RawSocket pending = data_listeners_[core].Accept(Millis(0));
  return pending.connected();
}

AssertionResult ForgedPhubd::ExpectBye(std::uint32_t core) {
  WireHeader bye;
  std::vector<std::byte> payload;
  if (AssertionResult r = Read(core, bye, payload); !r) return r;
  if (bye.op != Op::kBye || bye.worker != job_.rank || bye.payload_bytes != 0) {
    return AssertionFailure() << "core " << core << " got " << OpName(bye.op) << " of worker "
                              << bye.worker << ", not the BYE";
  }
  if (!data_[core].WaitClosed(kForgedStep)) {
    return AssertionFailure() << "core " << core << ": the client did not end the stream after "
                              << "its BYE";
  }
  data_[core].Close();
  return AssertionSuccess();
}

AssertionResult ForgedPhubd::ReadControl(proto::ControlMessage& message, Millis timeout) {
  const RawSocket::Read read = control_.ReadMessage(message, timeout);
  if (read != RawSocket::Read::kOk) return AssertionFailure() << "no control message: " << read;
  return AssertionSuccess();
}

AssertionResult ForgedPhubd::ExpectGoodbye(std::uint64_t iterations) {
  proto::ControlMessage message;
  const RawSocket::Read read = control_.ReadMessage(message, kForgedStep);
  if (read != RawSocket::Read::kOk) return AssertionFailure() << "no control message: " << read;
  if (!message.has_goodbye() || message.goodbye().iterations() != iterations) {
    return AssertionFailure() << "not a Goodbye after " << iterations
                              << " pushes: " << message.ShortDebugString();
  }
  return AssertionSuccess();
}

void ForgedPhubd::CloseAll() {
  control_.Close();
  for (RawSocket& d : data_) d.Close();
  control_listener_.Close();
  for (RawListener& l : data_listeners_) l.Close();
}

}  // namespace phub::testing
