#include "phub/topology/topology.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <unistd.h>

#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "phub/common/bounded_text.h"
#include "phub/common/plain_name.h"
#include "proto/topology.pb.h"

namespace phub::topology {
namespace {

// The parser's first complaint, with its line (1-based) and column.
class FirstError final : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (!text.empty()) return;
    text = absl::StrCat("line ", line + 1, " column ", column + 1, ": ", message);
  }
  std::string text;
};

}  // namespace

std::string ThisHostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

StatusOr<Topology> Topology::Parse(std::string_view text, std::string_view origin) {
  const auto bad = [&](const std::string& what, const std::string& fix) {
    return absl::InvalidArgumentError(
        absl::StrCat("topology ", std::string(origin), ": ", what, "; ", fix,
                     " (docs/operations.md \"Racks of racks\" has an example)"));
  };
  proto::Topology file;
  google::protobuf::TextFormat::Parser parser;
  FirstError error;
  parser.RecordErrorsTo(&error);
  if (!parser.ParseFromString(std::string(text), &file)) {
    return bad(error.text.empty() ? "cannot be parsed" : error.text,
               "each rack is `rack { name: \"r0\" pbox: \"HOST:PORT\" host: \"node1\" ... }`");
  }
  if (file.rack_size() == 0) return bad("has no rack", "list every rack of the job");
  if (file.rack_size() > static_cast<int>(kMaxRacks)) {
    return bad(absl::StrCat("has ", file.rack_size(), " racks, over ", kMaxRacks),
               "split the cluster");
  }
  Topology topology;
  topology.origin_ = std::string(origin);
  std::map<std::string, std::string> rack_of_host;  // host -> rack name
  std::map<std::string, std::string> rack_of_pbox;
  std::map<std::string, int> racks_named;
  for (int r = 0; r < file.rack_size(); ++r) {
    const proto::Rack& in = file.rack(r);
    const std::string which = absl::StrCat("rack ", r + 1, " ('", Bounded(in.name()), "')");
    if (const std::string fault = PlainNameFault(in.name()); !fault.empty()) {
      return bad(absl::StrCat(which, ": its name ", fault), absl::StrCat("a rack name is ",
                                                                         kPlainNameRule));
    }
    if (!racks_named.emplace(in.name(), r).second) {
      return bad(absl::StrCat("two racks are named '", in.name(), "'"), "name each rack once");
    }
    if (in.pbox().empty()) {
      return bad(absl::StrCat(which, " has no pbox"),
                 "give it pbox: \"HOST:PORT\", the control address of the rack's phubd");
    }
    auto pbox = ParseEndpoint(in.pbox());
    if (!pbox.ok()) {
      return bad(absl::StrCat(which, "'s pbox: ", pbox.status().message()),
                 "give the control address of the rack's phubd");
    }
    if (auto [it, fresh] = rack_of_pbox.emplace(in.pbox(), in.name()); !fresh) {
      return bad(absl::StrCat("racks '", it->second, "' and '", in.name(), "' both name pbox ",
                              in.pbox()),
                 "each rack has a phubd of its own");
    }
    if (in.host_size() == 0) {
      return bad(absl::StrCat(which, " has no host"), "list the rack's worker hosts");
    }
    Rack rack{.name = in.name(), .pbox = *pbox, .hosts = {}};
    for (const std::string& host : in.host()) {
      if (host.empty() || host.size() > 255) {
        return bad(absl::StrCat(which, " has a host name of ", host.size(), " bytes"),
                   "give each host as the workers know it (1 to 255 bytes)");
      }
      if (auto [it, fresh] = rack_of_host.emplace(host, in.name()); !fresh) {
        return bad(it->second == in.name()
                       ? absl::StrCat("host '", Bounded(host), "' is listed twice in rack '",
                                      in.name(), "'")
                       : absl::StrCat("host '", Bounded(host), "' is in two racks, '",
                                      it->second, "' and '", in.name(), "'"),
                   "a host is a worker of one rack: list it once");
      }
      if (rack_of_host.size() > kMaxHosts) {
        return bad(absl::StrCat("has over ", kMaxHosts, " hosts"), "split the cluster");
      }
      rack.hosts.push_back(host);
    }
    topology.world_size_ += static_cast<std::uint32_t>(rack.hosts.size());
    topology.racks_.push_back(std::move(rack));
  }
  return topology;
}

StatusOr<Topology> Topology::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read the topology file ", path,
                                            ": give --topology the file that lists the racks"));
  }
  std::string text(kMaxFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("topology ", path, " is over ", kMaxFileBytes, " bytes: not a topology"));
  }
  return Parse(text, path);
}

StatusOr<std::uint32_t> Topology::RackIndex(std::string_view name) const {
  std::vector<std::string> names;
  for (std::uint32_t r = 0; r < racks_.size(); ++r) {
    if (racks_[r].name == name) return r;
    names.push_back(racks_[r].name);
  }
  return absl::NotFoundError(absl::StrCat("topology ", origin_, " has no rack '",
                                          Bounded(name),
                                          "'; its racks: ", absl::StrJoin(names, ", ")));
}

StatusOr<Placement> Topology::Locate(std::string_view host) const {
  std::uint32_t before = 0;
  for (std::uint32_t r = 0; r < racks_.size(); ++r) {
    const auto& hosts = racks_[r].hosts;
    for (std::uint32_t i = 0; i < hosts.size(); ++i) {
      if (hosts[i] != host) continue;
      return Placement{.racks = static_cast<std::uint32_t>(racks_.size()),
                       .rack = r,
                       .rank_in_rack = i,
                       .rack_size = static_cast<std::uint32_t>(hosts.size()),
                       .rank = before + i,
                       .world_size = world_size_,
                       .pbox = racks_[r].pbox};
    }
    before += static_cast<std::uint32_t>(hosts.size());
  }
  return absl::NotFoundError(absl::StrCat(
      "host '", Bounded(host), "' is in no rack of topology ", origin_,
      ": add it to its rack's host list, or give the worker --hostname NAME as the file names it"));
}

}  // namespace phub::topology
