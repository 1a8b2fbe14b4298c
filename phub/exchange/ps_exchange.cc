#include "phub/exchange/ps_exchange.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace phub::exchange {

PsSeat JoinRackPbox(const topology::Placement& placement, PsExchangeOptions& options) {
  options.servers = {placement.pbox};
  PsSeat seat{{placement.rank_in_rack, placement.rack_size}, {}};
  // A topology of one rack is a flat job.
  if (placement.racks > 1) seat.role = {placement.racks, placement.rack, /*rack_workers=*/0};
  return seat;
}

StatusOr<std::unique_ptr<PsExchange>> PsExchange::Connect(const PsExchangeOptions& options,
                                                          PsSeat seat,
                                                          std::vector<keys::TensorSpec> tensors,
                                                          std::vector<std::span<float>> weights) {
  if (options.servers.empty()) {
    return absl::InvalidArgumentError("PsExchange: no servers given: pass at least one HOST:PORT");
  }
  if (weights.size() != tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat("PsExchange: ", weights.size(),
                                                   " weight buffers for ", tensors.size(),
                                                   " tensors: give one buffer per tensor"));
  }
  const auto num_servers = static_cast<std::uint32_t>(options.servers.size());
  if (options.client.min_workers > 0 && num_servers > 1) {
    return absl::InvalidArgumentError(
        "PsExchange: an elastic job (--min-workers) on several servers (ps-colocated): not "
        "supported: each phubd would decide its own members; use one PS (--comm ps)");
  }
  PHUB_ASSIGN_OR_RETURN(std::vector<keys::ServerShare> shares,
                        keys::SpreadOverServers(tensors, options.partition_bytes, num_servers));
  for (std::uint32_t s = 0; s < num_servers; ++s) {
    if (shares[s].slices.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "PsExchange: server ", s, " (", options.servers[s].host, ":", options.servers[s].port,
          ") would own nothing: the model has fewer ", options.partition_bytes,
          "-byte partitions than the ", num_servers,
          " servers; use fewer servers or a smaller partition size"));
    }
  }

  std::unique_ptr<PsExchange> exchange(new PsExchange());
  exchange->per_iteration_values_ = options.client.per_iteration_values;
  exchange->pieces_.resize(tensors.size());
  for (const keys::TensorSpec& t : tensors) exchange->elements_.push_back(t.elements);
  for (std::uint32_t s = 0; s < num_servers; ++s) {
    std::vector<std::span<float>> server_weights;
    for (std::uint32_t i = 0; i < shares[s].slices.size(); ++i) {
      const keys::TensorSlice& slice = shares[s].slices[i];
      if (weights[slice.tensor].size() != tensors[slice.tensor].elements) {
        return absl::InvalidArgumentError(absl::StrCat(
            "PsExchange: the weight buffer of tensor ", slice.tensor, " ('",
            tensors[slice.tensor].name, "') holds ", weights[slice.tensor].size(),
            " floats; the tensor table says ", tensors[slice.tensor].elements));
      }
      server_weights.push_back(weights[slice.tensor].subspan(slice.offset, slice.elements));
      exchange->pieces_[slice.tensor].push_back({s, i, slice.offset, slice.elements});
    }
    client::PsClientOptions client_options = options.client;
    client_options.host = options.servers[s].host;
    client_options.port = options.servers[s].port;
    auto client = client::detail::ConnectInRacks(client_options, seat.membership, seat.role,
                                                 shares[s].tensors, std::move(server_weights));
    if (!client.ok()) {
      return Status(client.status().code(),
                    absl::StrCat("server ", s, " (", client_options.host, ":", client_options.port,
                                 "): ", client.status().message()));
    }
    exchange->clients_.push_back(*std::move(client));
  }
  // Several servers resume a worker together only at the same iteration (each holds a share
  // of every step): one that resumed elsewhere means the job cannot go on consistently. With
  // one server there is nothing to compare, and nothing may be read twice: an elastic joiner
  // (one server only) learns its iteration from a Membership that may land between two reads;
  // comparing the one client with itself once failed a joiner with "(14 and 14)".
  if (exchange->clients_.size() > 1) {
    const std::uint64_t first = exchange->clients_[0]->resume_iteration();
    for (const auto& client : exchange->clients_) {
      if (const std::uint64_t here = client->resume_iteration(); here != first) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the servers resume this worker at different iterations (", first, " and ", here,
            "): restart the job from the same checkpoint on every server"));
      }
    }
  }
  if (num_servers > 1) {
    spdlog::info("model spread over {} servers ({} slices)", num_servers, [&] {
      std::size_t n = 0;
      for (const auto& share : shares) n += share.slices.size();
      return n;
    }());
  }
  return exchange;
}

PsExchange::~PsExchange() { (void)Close(); }

ElasticMembership* PsExchange::elastic() {
  return clients_.size() == 1 && clients_[0]->elastic() ? this : nullptr;
}
IterationMembers PsExchange::MembersOf(std::uint64_t iteration) const {
  return clients_[0]->MembersOf(iteration);
}
Status PsExchange::RequestLeave() { return clients_[0]->RequestLeave(); }

std::uint64_t PsExchange::start_iteration() const {
  return clients_.empty() ? 0 : clients_[0]->resume_iteration();
}

Status PsExchange::Init() {
  // Every worker visits the servers in the same order, so no two wait on each other.
  for (auto& client : clients_) PHUB_RETURN_IF_ERROR(client->Init());
  return absl::OkStatus();
}

Status PsExchange::BeginIteration(const kernels::StepValues& values) {
  if (!per_iteration_values_) {
    return absl::FailedPreconditionError(absl::StrCat(
        name(),
        " exchange: BeginIteration: phubd steps this job with fixed hyper-parameters; "
        "to change them per iteration (a schedule), make the exchange with "
        "PsExchangeOptions::client.per_iteration_values = true and the optimizer in "
        "client.optimizer (phub-worker does for any --lr-schedule but a constant one)"));
  }
  for (std::uint32_t s = 0; s < clients_.size(); ++s) {
    if (Status sent = clients_[s]->StepWith(values); !sent.ok()) {
      if (clients_.size() == 1) return sent;
      return Status(sent.code(), absl::StrCat("server ", s, ": ", sent.message()));
    }
  }
  return absl::OkStatus();
}

Status PsExchange::DeclareGradients(const std::vector<std::span<const float>>& grads) {
  if (grads.size() != pieces_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("DeclareGradients: ", grads.size(),
                                                   " buffers for ", pieces_.size(), " tensors"));
  }
  // Each server's client sees its slices of the tensors, as with the weights.
  std::vector<std::vector<std::span<const float>>> per_server(clients_.size());
  for (std::uint32_t t = 0; t < pieces_.size(); ++t) {
    if (grads[t].size() != elements_[t]) {
      return absl::InvalidArgumentError(absl::StrCat("DeclareGradients: tensor ", t, "'s buffer has ",
                                                     grads[t].size(), " floats; the tensor has ",
                                                     elements_[t]));
    }
    for (const Piece& p : pieces_[t]) {
      auto& list = per_server[p.server];
      if (list.size() <= p.server_tensor) list.resize(p.server_tensor + 1);
      list[p.server_tensor] = grads[t].subspan(p.offset, p.elements);
    }
  }
  for (std::uint32_t s = 0; s < clients_.size(); ++s) {
    PHUB_RETURN_IF_ERROR(clients_[s]->DeclareGradients(per_server[s]));
  }
  return absl::OkStatus();
}

Status PsExchange::Push(std::uint32_t tensor, std::span<const float> grads) {
  if (tensor >= pieces_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Push: tensor ", tensor, " does not exist (", pieces_.size(), " tensors)"));
  }
  if (grads.size() != elements_[tensor]) {
    return absl::InvalidArgumentError(absl::StrCat("Push: tensor ", tensor, "'s gradient has ",
                                                   grads.size(), " floats; the tensor has ",
                                                   elements_[tensor]));
  }
  for (const Piece& p : pieces_[tensor]) {
    PHUB_RETURN_IF_ERROR(
        clients_[p.server]->Push(p.server_tensor, grads.subspan(p.offset, p.elements)));
  }
  return absl::OkStatus();
}

Status PsExchange::Wait(std::uint32_t tensor) {
  if (tensor >= pieces_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Wait: tensor ", tensor, " does not exist (", pieces_.size(), " tensors)"));
  }
  for (const Piece& p : pieces_[tensor]) PHUB_RETURN_IF_ERROR(clients_[p.server]->Wait(p.server_tensor));
  return absl::OkStatus();
}

Status PsExchange::WaitAll() {
  for (auto& client : clients_) PHUB_RETURN_IF_ERROR(client->WaitAll());
  return absl::OkStatus();
}

Status PsExchange::Close() {
  Status first;
  for (auto& client : clients_) {
    Status s = client->Close();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

}  // namespace phub::exchange
