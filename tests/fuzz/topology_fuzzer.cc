// libFuzzer target: the racks-of-racks topology file (phub/topology/topology.h), read by phubd
// and every worker. Any bytes must give a topology or an InvalidArgument naming the file, never
// a crash; a topology accepted must keep the promises the relay and the workers rely on: at
// least one rack, plain unique rack names, a PBox each, every host in exactly
// one rack, world size = hosts, and Locate placing each host at its rank in file order.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "phub/common/plain_name.h"
#include "phub/topology/topology.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "%s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto topology = phub::topology::Topology::Parse(text, "fuzz.txtpb");
  if (!topology.ok()) {
    if (!absl::IsInvalidArgument(topology.status())) Fail("not InvalidArgument", "");
    if (std::string(topology.status().message()).find("fuzz.txtpb") == std::string::npos) {
      Fail("refusal without the file's name", std::string(topology.status().message()));
    }
    return 0;
  }
  const auto& racks = topology->racks();
  if (racks.empty() || racks.size() > phub::topology::kMaxRacks) Fail("rack count", "");
  std::set<std::string> names, hosts;
  std::uint32_t rank = 0;
  for (std::uint32_t r = 0; r < racks.size(); ++r) {
    const auto& rack = racks[r];
    if (!phub::PlainNameFault(rack.name).empty()) Fail("rack name", rack.name);
    if (!names.insert(rack.name).second) Fail("rack name twice", rack.name);
    if (rack.pbox.host.empty() || rack.pbox.port == 0) Fail("pbox", rack.name);
    if (rack.hosts.empty()) Fail("rack without hosts", rack.name);
    for (std::uint32_t i = 0; i < rack.hosts.size(); ++i, ++rank) {
      const std::string& host = rack.hosts[i];
      if (!hosts.insert(host).second) Fail("host twice", host);
      auto placed = topology->Locate(host);
      if (!placed.ok() || placed->rack != r || placed->rank_in_rack != i ||
          placed->rank != rank || placed->rack_size != rack.hosts.size()) {
        Fail("Locate", host);
      }
    }
  }
  if (rank != topology->world_size()) Fail("world size", std::to_string(rank));
  return 0;
}
