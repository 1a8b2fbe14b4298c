#include "phub/transport/shm/shm_setup.h"

#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "phub/transport/poll_until.h"
#include "phub/transport/shm/shm_ring.h"

namespace phub::transport::shm {

namespace {

constexpr int kDescriptors = 3;  // memory, the dialer's bell, the acceptor's bell

Status Errno(const std::string& what) {
  const int err = errno;
  return Status(absl::ErrnoToStatusCode(err), absl::StrCat(what, ": ", std::strerror(err)));
}

std::size_t MappingBytes(std::size_t ring_bytes) { return kControlBytes + 2 * ring_bytes; }

StatusOr<std::span<std::byte>> Map(int fd, std::size_t bytes) {
  void* at = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (at == MAP_FAILED) return Errno(absl::StrCat("mapping the shared ring memory (", bytes, " bytes)"));
  return std::span<std::byte>(static_cast<std::byte*>(at), bytes);
}

StatusOr<UniqueFd> NewBell() {
  UniqueFd bell(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!bell.valid()) return Errno("eventfd for a shm connection's bell");
  return bell;
}

// An eventfd is an anonymous inode that says so in /proc: a peer that passes a file or a pipe
// as a bell would make a wait spin or a ring block.
bool IsEventFd(int fd) {
  std::array<char, 64> target{};
  const std::string link = absl::StrCat("/proc/self/fd/", fd);
  const ssize_t n = ::readlink(link.c_str(), target.data(), target.size() - 1);
  return n > 0 && std::string_view(target.data(), n) == "anon_inode:[eventfd]";
}

// The hello's bytes and room for its descriptors, as sendmsg and recvmsg take them. Not movable:
// the message points into itself.
struct HelloMessage {
  explicit HelloMessage(std::span<std::byte> bytes) : data{bytes.data(), bytes.size()} {
    message.msg_iov = &data;
    message.msg_iovlen = 1;
    message.msg_control = control.data();
    message.msg_controllen = control.size();
  }
  HelloMessage(const HelloMessage&) = delete;
  HelloMessage& operator=(const HelloMessage&) = delete;
  iovec data;
  alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int) * kDescriptors)> control{};
  msghdr message{};
};

sockaddr_un AddressOf(std::uint16_t port, socklen_t& length) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string name = AbstractName(port);
  std::memcpy(address.sun_path, name.data(), name.size());
  length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
  return address;
}

}  // namespace

std::string AbstractName(std::uint16_t port) {
  return absl::StrCat(absl::string_view("\0", 1), "phub-shm-", port);
}

std::string ShownName(std::uint16_t port) { return absl::StrCat("@phub-shm-", port); }

StatusOr<std::size_t> DecodeHello(std::span<const std::byte> bytes) {
  if (bytes.size() != kHelloBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm hello of ", bytes.size(), " bytes, not ", kHelloBytes));
  }
  auto le = [&](std::size_t at, std::size_t n) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v |= std::uint64_t(bytes[at + i]) << (8 * i);
    return v;
  };
  if (le(0, 4) != kShmMagic) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shm hello: magic 0x", absl::Hex(le(0, 4)), " is not \"PHSM\": the listener is not phub's"));
  }
  if (le(4, 2) != kShmVersion || le(6, 2) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("shm hello: version ", le(4, 2), " (reserved ",
                                                   le(6, 2), "); this build speaks version ",
                                                   kShmVersion, ": run the same PHub on both sides"));
  }
  const std::uint64_t ring = le(8, 8);
  if (ring < kMinRingBytes || ring > kMaxRingBytes || (ring & (ring - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("shm hello: a ring of ", ring,
                                                   " bytes; a power of two in [", kMinRingBytes,
                                                   ", ", kMaxRingBytes, "] is expected"));
  }
  return static_cast<std::size_t>(ring);
}

Endpoint::Endpoint(Endpoint&& other) noexcept
    : mapping_(std::exchange(other.mapping_, {})), ring_bytes_(other.ring_bytes_),
      my_bell_(std::move(other.my_bell_)), peer_bell_(std::move(other.peer_bell_)) {}

Endpoint::~Endpoint() {
  if (!mapping_.empty()) ::munmap(mapping_.data(), mapping_.size());
}

StatusOr<Endpoint> OfferEndpoint(int socket_fd, std::size_t ring_bytes) {
  UniqueFd memory(::memfd_create("phub-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!memory.valid()) return Errno("memfd_create for a shm connection");
  const std::size_t bytes = MappingBytes(ring_bytes);
  if (::ftruncate(memory.get(), static_cast<off_t>(bytes)) != 0) {
    return Errno(absl::StrCat("sizing the shm connection's memory to ", bytes, " bytes"));
  }
  // The pages now, not at the first touch: shared memory that cannot be had at a fault is a
  // SIGBUS; here it is an error for this one connection.
  if (const int err = ::posix_fallocate(memory.get(), 0, static_cast<off_t>(bytes)); err != 0) {
    errno = err;
    return Errno(absl::StrCat("reserving ", bytes, " bytes of shared memory for a shm connection"));
  }
  if (::fcntl(memory.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return Errno("sealing the shm connection's memory");
  }
  PHUB_ASSIGN_OR_RETURN(UniqueFd dialer_bell, NewBell());
  PHUB_ASSIGN_OR_RETURN(UniqueFd acceptor_bell, NewBell());
  PHUB_ASSIGN_OR_RETURN(std::span<std::byte> mapping, Map(memory.get(), bytes));
  // The acceptor keeps both bells: it waits on its own and rings the dialer's.
  Endpoint endpoint(mapping, ring_bytes, std::move(acceptor_bell), std::move(dialer_bell));

  std::array<std::byte, kHelloBytes> hello{};
  auto put = [&](std::size_t at, std::size_t n, std::uint64_t v) {
    for (std::size_t i = 0; i < n; ++i) hello[at + i] = std::byte((v >> (8 * i)) & 0xff);
  };
  put(0, 4, kShmMagic);
  put(4, 2, kShmVersion);
  put(8, 8, ring_bytes);
  HelloMessage out(hello);
  msghdr& message = out.message;
  cmsghdr* rights = CMSG_FIRSTHDR(&message);
  rights->cmsg_level = SOL_SOCKET;
  rights->cmsg_type = SCM_RIGHTS;
  rights->cmsg_len = CMSG_LEN(sizeof(int) * kDescriptors);
  const int fds[kDescriptors] = {memory.get(), endpoint.peer_bell().get(),
                                 endpoint.my_bell().get()};
  std::memcpy(CMSG_DATA(rights), fds, sizeof(fds));
  const ssize_t sent = ::sendmsg(socket_fd, &message, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (sent != static_cast<ssize_t>(hello.size())) {
    return sent < 0 ? Errno("sending the shm hello") : absl::UnavailableError("shm hello cut short");
  }
  return endpoint;
}

StatusOr<Endpoint> TakeEndpoint(int socket_fd, std::chrono::steady_clock::time_point deadline,
                                const std::string& listener) {
  PHUB_ASSIGN_OR_RETURN(bool ready, PollUntil(socket_fd, POLLIN, deadline, "waiting for the shm hello"));
  if (!ready) {
    return absl::DeadlineExceededError(
        absl::StrCat(listener, " accepted but sent no shm hello in time: is it phub's?"));
  }
  std::array<std::byte, kHelloBytes + 1> hello{};  // one more: a longer hello shows as such
  HelloMessage in(hello);
  msghdr& message = in.message;
  const ssize_t got = ::recvmsg(socket_fd, &message, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (got < 0) return Errno(absl::StrCat("receiving the shm hello from ", listener));
  // Every descriptor that came is owned (closed on any failure below) before anything is checked.
  std::vector<UniqueFd> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < n; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds.emplace_back(fd);
    }
  }
  if (got == 0) return absl::UnavailableError(absl::StrCat(listener, " closed before its shm hello"));
  PHUB_ASSIGN_OR_RETURN(std::size_t ring_bytes,
                        DecodeHello(std::span<const std::byte>(hello.data(), got)));
  if ((message.msg_flags & MSG_CTRUNC) != 0 || fds.size() != kDescriptors) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shm hello from ", listener, " came with ", fds.size(), " descriptors, not ", kDescriptors));
  }
  const int seals = ::fcntl(fds[0].get(), F_GET_SEALS);
  struct stat st {};
  const std::size_t bytes = MappingBytes(ring_bytes);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0 || ::fstat(fds[0].get(), &st) != 0 ||
      static_cast<std::uint64_t>(st.st_size) < bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the shm memory from ", listener, " is not a memfd sealed against shrinking of at least ",
        bytes, " bytes: mapping it could fault this process"));
  }
  if (!IsEventFd(fds[1].get()) || !IsEventFd(fds[2].get())) {
    return absl::InvalidArgumentError(
        absl::StrCat("the shm bells from ", listener, " are not eventfds"));
  }
  PHUB_ASSIGN_OR_RETURN(std::span<std::byte> mapping, Map(fds[0].get(), bytes));
  return Endpoint(mapping, ring_bytes, std::move(fds[1]), std::move(fds[2]));
}

StatusOr<UniqueFd> ConnectUntil(std::uint16_t port, std::chrono::steady_clock::time_point deadline) {
  socklen_t length = 0;
  const sockaddr_un address = AddressOf(port, length);
  while (true) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) return Errno("socket(AF_UNIX) for a shm connection");
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), length) == 0) return fd;
    // Nobody listens yet (phubd starting), or its backlog is full: try again shortly.
    if (errno != ECONNREFUSED && errno != ENOENT && errno != EAGAIN) {
      return Errno(absl::StrCat("connecting to ", ShownName(port)));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          "nobody listens on ", ShownName(port),
          ": is phubd on this host, in this network namespace, with --transport shm?"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Status CheckHostIsThisOne(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat("resolving ", host, ": ", ::gai_strerror(rc)));
  }
  std::vector<std::vector<std::byte>> wanted;
  bool local = false;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      const std::uint32_t ip = ntohl(in->sin_addr.s_addr);
      local |= (ip >> 24) == 127 || ip == 0;
      const auto* b = reinterpret_cast<const std::byte*>(&in->sin_addr);
      wanted.emplace_back(b, b + 4);
    } else if (a->ai_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      local |= IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) || IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr);
      const auto* b = reinterpret_cast<const std::byte*>(&in6->sin6_addr);
      wanted.emplace_back(b, b + 16);
    }
  }
  ::freeaddrinfo(found);
  ifaddrs* interfaces = nullptr;
  if (!local && ::getifaddrs(&interfaces) == 0) {
    for (ifaddrs* i = interfaces; i != nullptr && !local; i = i->ifa_next) {
      if (i->ifa_addr == nullptr) continue;
      std::vector<std::byte> have;
      if (i->ifa_addr->sa_family == AF_INET) {
        const auto* b = reinterpret_cast<const std::byte*>(
            &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr);
        have.assign(b, b + 4);
      } else if (i->ifa_addr->sa_family == AF_INET6) {
        const auto* b = reinterpret_cast<const std::byte*>(
            &reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr);
        have.assign(b, b + 16);
      }
      for (const auto& w : wanted) local |= !have.empty() && w == have;
    }
    ::freeifaddrs(interfaces);
  }
  if (local) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "--transport shm reaches only a phubd on this host, and ", host,
      " is not an address of this host: run phubd with --transport tcp (or verbs) for workers "
      "on other hosts"));
}

int PeerPid(int socket_fd) {
  ucred credentials{};
  socklen_t length = sizeof(credentials);
  if (::getsockopt(socket_fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return -1;
  return credentials.pid;
}

}  // namespace phub::transport::shm
