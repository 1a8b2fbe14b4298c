// phub_tcp_blaster: the raw-TCP reference of the `exchange` benchmark (run_exchange.py drives
// it). It moves exactly the bytes a PS push+pull moves, over the same stream layout, with no
// aggregation, no headers and no optimizer:
//
//   server (--serve --cores C --world N): C threads; thread c listens on its own port and
//     accepts N connections (one from each client), like one phubd core.
//   client (--connect --ports P0,..,PC-1 --rank R): C connections, one thread each.
//
// Each iteration (C connections per client, S bytes split over them, part c = S/C give or take
// the remainder):
//   barrier  every client thread sends 1 byte; every server thread reads 1 byte from each of
//            its N connections, then all C server threads meet (std::barrier), then each writes
//            1 byte back on each connection. So no client's reply leaves before all N*C bytes
//            arrived: the same alignment as the PS workers' barrier tensor.
//   t0       once all of a client's threads got their barrier reply
//   data     each client thread writes part c, then reads part c back. Each server thread reads
//            part c from all N connections (poll, whichever is ready), then writes part c back
//            to all N (poll, whichever is writable).
//   t1       once all of a client's threads read their part back
// TCP_NODELAY is on everywhere; socket buffers are left to Linux's autotuning, as in phubd,
// unless --socket-buffer-bytes fixes them.
//
// Client output (--out, TSV): the same format as phub_exchange_worker (no checksum line):
//   # phub_tcp_blaster rank=R world=N bytes=B iters=I warmup=W
//   iter  t0_ns  t1_ns  seconds
// Server: --port-file gets "P0,P1,...", written once all C ports listen.
// Exit codes: 0 done; 2 bad flags; 3 a socket call failed or a peer left early.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

// A socket call failed: the message names the call and errno. Thrown inside one thread and
// caught at that thread's top, which prints it and ends the process (exit 3).
struct IoError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void ThrowErrno(const std::string& what) {
  throw IoError(what + ": " + std::strerror(errno));
}

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

std::int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// TCP_NODELAY, and fixed SO_SNDBUF/SO_RCVBUF when buffer_bytes > 0 (as phubd's
// --socket-buffer-bytes; 0 leaves Linux's autotuning on).
void TuneSocket(int fd, int buffer_bytes) {
  int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
    ThrowErrno("setsockopt(TCP_NODELAY)");
  }
  if (buffer_bytes > 0 &&
      (::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof buffer_bytes) != 0 ||
       ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof buffer_bytes) != 0)) {
    ThrowErrno("setsockopt(SO_SNDBUF/SO_RCVBUF)");
  }
}

// Blocking loops that handle short reads and writes.
void WriteAll(int fd, const std::byte* data, std::size_t n) {
  while (n > 0) {
    ssize_t k = ::send(fd, data, n, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR) continue;
      ThrowErrno("send");
    }
    data += k;
    n -= static_cast<std::size_t>(k);
  }
}

void ReadAll(int fd, std::byte* data, std::size_t n) {
  while (n > 0) {
    ssize_t k = ::recv(fd, data, n, 0);
    if (k < 0) {
      if (errno == EINTR) continue;
      ThrowErrno("recv");
    }
    if (k == 0) throw IoError("peer closed the connection");
    data += k;
    n -= static_cast<std::size_t>(k);
  }
}

// Moves `n` bytes on every fd at once: reads into bufs[i] (reading=true) or writes from it,
// serving whichever socket poll() says is ready. Used by a server thread on its N connections.
void TransferAll(const std::vector<Fd>& fds, std::vector<std::vector<std::byte>>& bufs,
                 std::size_t n, bool reading) {
  std::vector<std::size_t> done(fds.size(), 0);
  std::vector<pollfd> polls;
  std::vector<std::size_t> index;
  while (true) {
    polls.clear();
    index.clear();
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (done[i] < n) {
        polls.push_back({fds[i].get(), static_cast<short>(reading ? POLLIN : POLLOUT), 0});
        index.push_back(i);
      }
    }
    if (polls.empty()) return;
    if (::poll(polls.data(), polls.size(), -1) < 0) {
      if (errno == EINTR) continue;
      ThrowErrno("poll");
    }
    for (std::size_t p = 0; p < polls.size(); ++p) {
      if (polls[p].revents == 0) continue;
      const std::size_t i = index[p];
      std::byte* at = bufs[i].data() + done[i];
      // MSG_DONTWAIT: the fds stay blocking for the simple paths; here we never block in I/O.
      ssize_t k = reading ? ::recv(fds[i].get(), at, n - done[i], MSG_DONTWAIT)
                          : ::send(fds[i].get(), at, n - done[i], MSG_DONTWAIT | MSG_NOSIGNAL);
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
        ThrowErrno(reading ? "recv" : "send");
      }
      if (k == 0 && reading) throw IoError("a client closed its connection early");
      done[i] += static_cast<std::size_t>(k);
    }
  }
}

// Part c of S bytes split over C connections: the first S % C parts get one byte more.
std::size_t PartBytes(std::uint64_t total, std::uint32_t parts, std::uint32_t c) {
  return total / parts + (c < total % parts ? 1 : 0);
}

struct Options {
  bool serve = false;
  bool connect = false;
  std::string listen = "127.0.0.1";
  std::string host = "127.0.0.1";
  std::string port_file;
  std::string ports_csv;
  std::string out_path;
  std::uint32_t cores = 1;
  std::uint32_t world = 1;
  std::uint32_t rank = 0;
  double mib = 4;
  std::uint32_t iters = 10;
  std::uint32_t warmup = 2;
  int buffer_bytes = 0;
  std::uint64_t bytes() const { return static_cast<std::uint64_t>(mib * 1024 * 1024) / 4 * 4; }
};

// Runs fn on `count` threads (thread i gets i). An error in any thread ends the process at once
// (exit 3): its siblings may be blocked in a barrier or a read that would never complete.
template <typename Fn>
void RunThreads(const char* who, std::uint32_t count, Fn fn) {
  std::vector<std::thread> threads;
  for (std::uint32_t i = 0; i < count; ++i) {
    threads.emplace_back([=] {
      try {
        fn(i);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "tcp_blaster %s, thread %u: %s\n", who, i, e.what());
        std::fflush(stderr);
        std::_Exit(3);
      }
    });
  }
  for (auto& t : threads) t.join();
}

int Serve(const Options& o) {
  std::vector<Fd> listeners;
  std::vector<std::uint16_t> ports;
  for (std::uint32_t c = 0; c < o.cores; ++c) {
    Fd fd(::socket(AF_INET, SOCK_STREAM, 0));
    if (fd.get() < 0) ThrowErrno("socket");
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = 0;
    if (::inet_pton(AF_INET, o.listen.c_str(), &addr.sin_addr) != 1) {
      throw IoError("--listen '" + o.listen + "' is not an IPv4 address");
    }
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) ThrowErrno("bind");
    if (::listen(fd.get(), static_cast<int>(o.world) + 8) != 0) ThrowErrno("listen");
    socklen_t len = sizeof addr;
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ThrowErrno("getsockname");
    }
    ports.push_back(ntohs(addr.sin_port));
    listeners.push_back(std::move(fd));
  }
  {
    // Write to a temporary name and rename, so a reader never sees half a line.
    std::string tmp = o.port_file + ".tmp";
    std::ofstream out(tmp);
    for (std::size_t c = 0; c < ports.size(); ++c) out << (c ? "," : "") << ports[c];
    out << "\n";
    out.close();
    if (!out || std::rename(tmp.c_str(), o.port_file.c_str()) != 0) {
      throw IoError("cannot write --port-file " + o.port_file);
    }
  }

  std::barrier meet(static_cast<std::ptrdiff_t>(o.cores));
  const std::uint64_t total = o.bytes();
  RunThreads("server", o.cores, [&](std::uint32_t c) {
    std::vector<Fd> conns;
    for (std::uint32_t w = 0; w < o.world; ++w) {
      Fd fd(::accept(listeners[c].get(), nullptr, nullptr));
      if (fd.get() < 0) ThrowErrno("accept");
      TuneSocket(fd.get(), o.buffer_bytes);
      conns.push_back(std::move(fd));
    }
    const std::size_t part = PartBytes(total, o.cores, c);
    // One buffer per connection, touched now so page faults stay out of the timing.
    std::vector<std::vector<std::byte>> bufs(o.world, std::vector<std::byte>(part, std::byte{1}));
    std::vector<std::vector<std::byte>> ones(o.world, std::vector<std::byte>(1, std::byte{1}));
    for (std::uint32_t it = 0; it < o.warmup + o.iters; ++it) {
      TransferAll(conns, ones, 1, /*reading=*/true);
      meet.arrive_and_wait();
      TransferAll(conns, ones, 1, /*reading=*/false);
      TransferAll(conns, bufs, part, /*reading=*/true);
      TransferAll(conns, bufs, part, /*reading=*/false);
    }
    // Wait for the clients to hang up, so no connection is reset under a client's last read.
    std::byte b;
    for (auto& fd : conns) (void)::recv(fd.get(), &b, 1, 0);
  });
  return 0;
}

int Connect(const Options& o) {
  std::vector<std::uint16_t> ports;
  {
    std::stringstream in(o.ports_csv);
    std::string item;
    while (std::getline(in, item, ','))
      ports.push_back(static_cast<std::uint16_t>(std::stoi(item)));
  }
  const auto cores = static_cast<std::uint32_t>(ports.size());
  const std::uint64_t total = o.bytes();

  std::vector<Fd> conns(cores);
  for (std::uint32_t c = 0; c < cores; ++c) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(ports[c]);
    if (::inet_pton(AF_INET, o.host.c_str(), &addr.sin_addr) != 1) {
      throw IoError("--host '" + o.host + "' is not an IPv4 address");
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (true) {
      Fd fd(::socket(AF_INET, SOCK_STREAM, 0));
      if (fd.get() < 0) ThrowErrno("socket");
      if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
        TuneSocket(fd.get(), o.buffer_bytes);
        conns[c] = std::move(fd);
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) ThrowErrno("connect");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  const std::uint32_t rounds = o.warmup + o.iters;
  std::vector<std::int64_t> t0(rounds), t1(rounds, 0);
  std::vector<std::vector<std::int64_t>> ends(cores, std::vector<std::int64_t>(rounds));
  // All of this client's threads got their barrier reply: that instant is t0.
  std::atomic<std::uint32_t> round{0};
  std::barrier aligned(static_cast<std::ptrdiff_t>(cores),
                       [&]() noexcept { t0[round.fetch_add(1)] = NowNs(); });
  const std::string who = "client " + std::to_string(o.rank);
  RunThreads(who.c_str(), cores, [&](std::uint32_t c) {
    const std::size_t part = PartBytes(total, cores, c);
    std::vector<std::byte> send_buf(part, std::byte{2}), recv_buf(part, std::byte{0});
    std::byte one{1};
    for (std::uint32_t it = 0; it < rounds; ++it) {
      WriteAll(conns[c].get(), &one, 1);
      ReadAll(conns[c].get(), &one, 1);
      aligned.arrive_and_wait();
      WriteAll(conns[c].get(), send_buf.data(), part);
      ReadAll(conns[c].get(), recv_buf.data(), part);
      ends[c][it] = NowNs();
    }
  });
  for (std::uint32_t it = 0; it < rounds; ++it) {
    for (std::uint32_t c = 0; c < cores; ++c) t1[it] = std::max(t1[it], ends[c][it]);
  }

  std::ofstream out(o.out_path);
  out << "# phub_tcp_blaster rank=" << o.rank << " world=" << o.world << " bytes=" << total
      << " iters=" << o.iters << " warmup=" << o.warmup << "\n";
  out << "iter\tt0_ns\tt1_ns\tseconds\n";
  for (std::uint32_t it = o.warmup; it < rounds; ++it) {
    char line[128];
    std::snprintf(line, sizeof line, "%u\t%" PRId64 "\t%" PRId64 "\t%.9f\n", it - o.warmup, t0[it],
                  t1[it], static_cast<double>(t1[it] - t0[it]) * 1e-9);
    out << line;
  }
  out.close();
  if (!out) {
    std::fprintf(stderr, "tcp_blaster client %u: cannot write %s\n", o.rank, o.out_path.c_str());
    return 3;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "phub_tcp_blaster: raw TCP loopback reference for the exchange benchmark. Moves the bytes "
      "of a PS push+pull (S up and S down per client over C connections) with no aggregation."};
  auto* serve = app.add_flag("--serve", o.serve, "Run the server: C threads x N connections");
  auto* connect = app.add_flag("--connect", o.connect, "Run one client: C connections");
  serve->excludes(connect);
  app.add_option("--listen", o.listen, "Server: IPv4 address to listen on")->capture_default_str();
  app.add_option("--port-file", o.port_file, "Server: write the C ports here, comma-separated");
  app.add_option("--cores", o.cores, "Server: threads (= connections per client)")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--world", o.world, "Number of clients")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--host", o.host, "Client: server's IPv4 address")->capture_default_str();
  app.add_option("--ports", o.ports_csv, "Client: the server's ports, comma-separated");
  app.add_option("--rank", o.rank, "Client: rank (for the output only)")->capture_default_str();
  app.add_option("--out", o.out_path, "Client: per-iteration times (TSV)");
  app.add_option("--mib", o.mib, "S in MiB per client each way")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--iters", o.iters, "Timed iterations")->capture_default_str();
  app.add_option("--warmup", o.warmup, "Untimed iterations first")->capture_default_str();
  app.add_option("--socket-buffer-bytes", o.buffer_bytes,
                 "Fixed SO_SNDBUF/SO_RCVBUF; 0 = Linux autotuning")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (o.serve == o.connect) {
    std::fprintf(stderr, "tcp_blaster: give exactly one of --serve, --connect\n");
    return 2;
  }
  if (o.serve && o.port_file.empty()) {
    std::fprintf(stderr, "tcp_blaster: --serve needs --port-file\n");
    return 2;
  }
  if (o.connect && (o.ports_csv.empty() || o.out_path.empty())) {
    std::fprintf(stderr, "tcp_blaster: --connect needs --ports and --out\n");
    return 2;
  }
  if (o.bytes() < o.cores) {
    std::fprintf(stderr, "tcp_blaster: --mib %g is less than one byte per connection\n", o.mib);
    return 2;
  }
  try {
    return o.serve ? Serve(o) : Connect(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tcp_blaster: %s\n", e.what());
    return 3;
  }
}
