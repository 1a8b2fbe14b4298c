// A job's Welcome to a member (docs/protocol.md "The Welcome"): the job's layout, optimizer,
// wire and transport, where it resumes, its elastic membership, and every core's endpoint.
#include <algorithm>

#include "phub/common/version.h"
#include "phub/server/admission/hello_check.h"
#include "phub/server/job/job.h"

namespace phub::server {

void Job::SendWelcome(const SessionPtr& member, bool resumed, std::uint64_t resume_iteration) {
  proto::ControlMessage message;
  proto::Welcome& welcome = *message.mutable_welcome();
  welcome.set_protocol_version(kProtocolVersion);
  welcome.set_chunk_bytes(spec_->table.chunk_bytes());
  for (auto owner : spec_->table.owners()) welcome.add_chunk_owner(owner);
  welcome.set_session(spec_->session);
  welcome.set_weights_from_server(!spec_->initial_weights.empty() ||
                                  spec_->weights_from_upstream);
  // A rack's part sums without stepping; its workers are told the job's optimizer, which the
  // chunks' homes run.
  welcome.set_optimizer(kernels::Describe(spec_->relay ? *JobOptimizer(job_hello_, host_.admission.optimizer)
                                                       : spec_->optimizer));
  welcome.set_wire(kernels::WireFormatName(spec_->wire.format));
  welcome.set_wire_weights(spec_->wire.weights);
  welcome.set_transport(transport::TransportName(host_.data_plane.transport));
  const bool joining = elastic_.enabled &&
                       !std::binary_search(elastic_.members.begin(), elastic_.members.end(),
                                           static_cast<std::uint32_t>(member->rank));
  // A joiner sends no initial weights: its first are the job's, of the iteration before it
  // joins (its Membership's from_iteration - 1).
  welcome.set_resumed(resumed || joining);
  welcome.set_resume_iteration(resume_iteration);
  DescribeValues(welcome, resumed, resume_iteration);
  welcome.set_rank(static_cast<std::uint32_t>(member->rank));
  if (joining) {
    welcome.set_joining(true);  // its Membership comes once it has attached
  } else if (elastic_.enabled) {
    DescribeMembership(*welcome.mutable_membership());
  }
  welcome.set_liveness_timeout_ms(
      static_cast<std::uint32_t>(std::max(0, deadlines().liveness_timeout_ms)));
  // A core listening on its own NIC is reached at that NIC's address; one listening on every
  // address, at the address the worker reached the control port on.
  boost::system::error_code ec;
  const std::string control_host = member->socket.local_endpoint(ec).address().to_string();
  for (auto& core : host_.cores) {
    proto::CoreEndpoint& endpoint = *welcome.add_cores();
    endpoint.set_server(0);
    endpoint.set_core(core->index());
    const auto address = boost::asio::ip::make_address(core->address(), ec);
    endpoint.set_host(ec || address.is_unspecified() ? control_host : core->address());
    endpoint.set_port(core->port(spec_->session));
    endpoint.set_nic(core->nic());
  }
  Send(member, message);
}

}  // namespace phub::server
