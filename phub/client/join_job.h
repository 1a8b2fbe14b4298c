// A worker's side of the control-plane handshake (docs/protocol.md): Hello out on the control
// connection, Welcome or Error back. What the Welcome says is checked here, once: the key
// table it implies, the cores in order, the data plane phubd runs.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "phub/client/detail/rack_role.h"
#include "phub/client/ps_client.h"
#include "phub/common/status.h"
#include "phub/keys/key_table.h"
#include "phub/transport/transport_kind.h"
#include "proto/phub.pb.h"

namespace phub::client {

struct CoreAddress {
  std::string host;
  std::uint16_t port = 0;
  std::uint32_t nic = 0;  // phubd's NIC the core serves (any value: taken modulo ours)
};

struct JoinedJob {
  keys::KeyTable table;
  bool weights_from_server = false;
  std::uint64_t session = 0;
  transport::TransportKind transport = transport::TransportKind::kTcp;  // phubd's data plane
  std::vector<CoreAddress> cores;  // by core index
  // The job's weights exist already (a rejoin, or phubd resumed a checkpoint): no INIT; the
  // first weights are those of resume_iteration.
  bool resumed = false;
  std::uint64_t resume_iteration = 0;
  int liveness_timeout_ms = 0;  // phubd's; 0: no heartbeats
  // PsClientOptions::per_iteration_values, resumed: the values of resume_iteration, if phubd
  // knows them.
  std::optional<kernels::StepValues> resume_values;
  // An elastic job: this worker's rank (phubd's choice), the members when it starts with the
  // job (a Membership), or joining: its first Membership comes once it has attached.
  std::uint32_t rank = 0;
  bool joining = false;
  std::optional<proto::Membership> membership;
};

// `timeout_ms`, or what is left of options.deadline if that is less (0 when it has passed).
int WithinDeadline(const PsClientOptions& options, int timeout_ms);

// Connects to phubd's control port (retrying refused connections for
// options.connect_timeout_ms), sends the Hello and waits for the answer (phubd answers once
// every worker has joined; meanwhile it sends a Heartbeat every quarter of
// options.hello_answer_timeout_ms). `control` is the open control connection on return, OK or
// not. InvalidArgument for a refused Hello (phubd's reason and fix) or a malformed Welcome,
// Unavailable when phubd cannot be reached, or is silent for options.hello_answer_timeout_ms
// after the Hello (stopped, hung), or options.deadline passes first.
// `membership` and `role` are who the Hello says this client is.
StatusOr<JoinedJob> JoinJob(boost::asio::io_context& context, const PsClientOptions& options,
                            Membership membership, const detail::RackRole& role,
                            std::vector<keys::TensorSpec> tensors,
                            boost::asio::ip::tcp::socket& control);

}  // namespace phub::client
