// How many server cores a NIC needs, from the CPU each byte costs phubd (docs/design.md
// "Sizing a PBox", measured in issue 18: benchmarks.md "phubd's CPU per byte received").
#pragma once

#include <string>

namespace phub::placement {

// A core's seconds per byte received, the weights sent back included. TCP: 0.5 ns on the
// emulated rack (copies and syscalls nine tenths of it). Verbs: the NIC does the copies; what
// remains is the aggregation and bookkeeping, ~0.05 ns, taken as 0.08 for headroom (one core
// per 100 Gbit/s).
inline constexpr double kTcpCoreSecondsPerByte = 0.5e-9;
inline constexpr double kVerbsCoreSecondsPerByte = 0.08e-9;

// Cores that keep a NIC moving `bytes_per_s` busy (fractional).
inline double CoresToFeed(double bytes_per_s, bool verbs) {
  return bytes_per_s * (verbs ? kVerbsCoreSecondsPerByte : kTcpCoreSecondsPerByte);
}

// The interface's link speed (sysfs class/net/IF/speed, Mbit/s) in bytes/s; 0 when unknown
// (lo, a link that is down, no such interface).
double InterfaceBytesPerSecond(const std::string& interface, const std::string& sysfs = "/sys");

}  // namespace phub::placement
