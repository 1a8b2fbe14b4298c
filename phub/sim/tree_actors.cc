#include "phub/sim/tree_actors.h"

#include <simgrid/s4u.hpp>

#include <algorithm>
#include <memory>
#include <string>

#include "phub/sim/collective_rank.h"
#include "phub/sim/streams.h"

namespace phub::sim {

namespace sg4 = simgrid::s4u;

namespace {

// ncclGetBtree's parent of `rank`: clear its lowest set bit and set the next one up, or only
// clear it when that is past the last rank.
int BtreeParent(std::uint32_t n, std::uint32_t rank) {
  if (rank == 0) return -1;
  std::uint32_t bit = 1;
  while ((bit & rank) == 0) bit <<= 1;
  std::uint32_t up = (rank ^ bit) | (bit << 1);
  if (up >= n) up = rank ^ bit;
  return static_cast<int>(up);
}

// Each tree edge's two connections: "from>to" of tree t.
std::string Edge(int t, int from, int to) {
  return std::to_string(t) + ":" + std::to_string(from) + ">" + std::to_string(to);
}
std::string DataBox(int t, int from, int to) { return "tree_data" + Edge(t, from, to); }
// Where the receiver's role actor takes a piece from once it is usable; the root's turn-around
// is its own edge (root > root).
std::string ReadyBox(int t, int from, int to) { return "tree_ready" + Edge(t, from, to); }
std::string GoBox(const char* role, int t, std::size_t r) {
  return std::string("tree_go_") + role + std::to_string(t) + "_" + std::to_string(r);
}
std::string DoneBox(std::size_t r) { return "tree_done" + std::to_string(r); }

// Hands over a time (a heap double the taker frees): when the piece is usable.
void PutUsableAt(const std::string& box, double at) {
  sg4::Mailbox::by_name(box)->put_init(new double(at), 0)->detach();
}
// Takes the next piece of `box`, waiting until it is usable.
void Take(const std::string& box) {
  std::unique_ptr<double> at(sg4::Mailbox::by_name(box)->get<double>());
  if (*at > sg4::Engine::get_clock()) sg4::this_actor::sleep_until(*at);
}

// One tree edge's connection from `from` to `to`: a sender on `from` that puts its queued
// pieces on the link one after another, and a receiver on `to`, always waiting, that notes
// each piece's arrival and hands it on to ReadyBox `hop` seconds later. Send returns at once.
class Hop {
 public:
  Hop(int t, int from, int to, sg4::Host* from_host, sg4::Host* to_host, double hop)
      : queue_("tree_queue" + Edge(t, from, to)) {
    const std::string queue = queue_, data = DataBox(t, from, to), ready = ReadyBox(t, from, to);
    sg4::Actor::create("tree_send" + Edge(t, from, to), from_host, [queue, data] {
      Own(queue);
      for (;;) {
        std::unique_ptr<double> bytes(sg4::Mailbox::by_name(queue)->get<double>());
        sg4::Mailbox::by_name(data)->put(Token(), static_cast<std::uint64_t>(*bytes));
      }
    })->daemonize();
    sg4::Actor::create("tree_land" + Edge(t, from, to), to_host, [data, ready, hop] {
      for (;;) {
        Receive(data);
        PutUsableAt(ready, sg4::Engine::get_clock() + hop);
      }
    })->daemonize();
  }
  void Send(double bytes) const {
    sg4::Mailbox::by_name(queue_)->put_init(new double(bytes), 0)->detach();
  }

 private:
  std::string queue_;
};

// The pieces of tree t's half of `bytes`: tree_piece_bytes each (the last the rest), or
// larger where there would be more than kMostPieces (a gradient of terabytes would otherwise
// be millions of messages a hop).
constexpr std::uint64_t kMostPieces = 4096;
struct PieceCut {
  std::uint64_t half = 0, piece = 1, count = 0;
  double Size(std::uint64_t k) const {
    return static_cast<double>(std::min(piece, half - k * piece));
  }
};
PieceCut Pieces(const Scenario& s, std::uint64_t bytes, int t) {
  PieceCut cut;
  cut.half = t == 0 ? (bytes + 1) / 2 : bytes / 2;
  cut.piece = std::max<std::uint64_t>(
      {1, s.tree_piece_bytes, (cut.half + kMostPieces - 1) / kMostPieces});
  cut.count = (cut.half + cut.piece - 1) / cut.piece;
  return cut;
}

}  // namespace

std::array<Tree, 2> DoubleBinaryTree(std::uint32_t n) {
  std::array<Tree, 2> trees{Tree(n), Tree(n)};
  for (std::uint32_t r = 0; r < n; ++r) {
    trees[0][r].parent = BtreeParent(n, r);
    // ncclGetDtree: tree 1 is tree 0 of the ranks mirrored (n even) or shifted by one (n odd).
    const std::uint32_t image = n % 2 == 0 ? n - 1 - r : (r + n - 1) % n;
    const int up = BtreeParent(n, image);
    trees[1][r].parent = up < 0 ? -1
                                : static_cast<int>(n % 2 == 0 ? n - 1 - up : (up + 1) % n);
  }
  for (Tree& tree : trees) {
    for (std::uint32_t r = 0; r < n; ++r) {
      if (tree[r].parent >= 0) tree[tree[r].parent].children.push_back(static_cast<int>(r));
    }
  }
  return trees;
}

std::uint32_t Depth(const Tree& tree) {
  // A parent's rank is above its children's in neither tree order, so walk each chain.
  std::vector<int> depth(tree.size(), -1);
  std::uint32_t deepest = 0;
  for (std::size_t r = 0; r < tree.size(); ++r) {
    std::vector<int> chain;
    int at = static_cast<int>(r);
    while (at >= 0 && depth[at] < 0) {
      chain.push_back(at);
      at = tree[at].parent;
    }
    int d = at < 0 ? -1 : depth[at];
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) depth[*it] = ++d;
    deepest = std::max(deepest, static_cast<std::uint32_t>(depth[r]));
  }
  return deepest;
}

double TreeBytesPerWorker(const Scenario& s) {
  std::uint64_t total = 0;
  for (const Tensor& t : s.tensors) total += t.bytes;
  const std::array<double, 2> half = {static_cast<double>((total + 1) / 2),
                                      static_cast<double>(total / 2)};
  const std::array<Tree, 2> trees = DoubleBinaryTree(s.workers);
  double most = 0;
  for (std::uint32_t r = 0; r < s.workers; ++r) {
    double bytes = 0;
    for (int t = 0; t < 2; ++t) {
      bytes += half[t] * (trees[t][r].children.size() + (trees[t][r].parent >= 0 ? 1 : 0));
    }
    most = std::max(most, bytes);
  }
  return most;
}

double TreeHopSeconds(const Scenario& s) { return 2 * s.latency_us * 1e-6; }

std::uint32_t ExtraLevels(std::uint32_t workers, std::uint32_t hosts) {
  const std::array<Tree, 2> real = DoubleBinaryTree(workers), simulated = DoubleBinaryTree(hosts);
  std::uint32_t most = 0;
  for (int t = 0; t < 2; ++t) most = std::max(most, Depth(real[t]) - Depth(simulated[t]));
  return most;
}

double ExtraDepthSeconds(const Scenario& s, std::uint32_t levels, std::uint64_t bytes) {
  const PieceCut cut = Pieces(s, bytes, 0);
  const double piece = static_cast<double>(std::min(cut.piece, cut.half));
  // A level's hop up shares the parent's link with the sibling's copy, its hop down the
  // parent's link with the copy to the sibling: 2 p / B each.
  return 2.0 * levels * (TreeHopSeconds(s) + 2 * piece / WorkerBytesPerSecond(s));
}

void StartTreeActors(const Scenario& s, const Platform& platform, IterationLog& log) {
  const std::size_t hosts = platform.groups.size();
  log.Resize(hosts, s.iterations);
  const auto trees = std::make_shared<const std::array<Tree, 2>>(
      DoubleBinaryTree(static_cast<std::uint32_t>(hosts)));
  const double hop = TreeHopSeconds(s);
  const std::uint32_t levels = ExtraLevels(s.workers, static_cast<std::uint32_t>(hosts));
  const auto host = [&platform](int r) {
    return platform.groups[static_cast<std::size_t>(r)].host;
  };
  const auto go = [](const char* role, int t, std::size_t r) {
    std::unique_ptr<std::uint64_t> bytes(
        sg4::Mailbox::by_name(GoBox(role, t, r))->get<std::uint64_t>());
    return *bytes;
  };
  for (int t = 0; t < 2; ++t) {
    for (std::size_t rank = 0; rank < hosts; ++rank) {
      const int r = static_cast<int>(rank);
      const TreeNode& node = (*trees)[t][rank];
      // Reduce: each piece once the children's copies are usable, to the parent (the root
      // turns it around).
      std::shared_ptr<Hop> up;
      if (node.parent >= 0) {
        up = std::make_shared<Hop>(t, r, node.parent, host(r), host(node.parent), hop);
      }
      sg4::Actor::create("tree_up" + Edge(t, r, node.parent), host(r),
                         [&s, trees, t, r, rank, up, go] {
        Own(GoBox("up", t, rank));
        const TreeNode& me = (*trees)[t][rank];
        for (int c : me.children) Own(ReadyBox(t, c, r));
        for (;;) {
          const PieceCut cut = Pieces(s, go("up", t, rank), t);
          for (std::uint64_t k = 0; k < cut.count; ++k) {
            const double piece = cut.Size(k);
            for (int c : me.children) Take(ReadyBox(t, c, r));
            if (up) {
              up->Send(piece);
            } else {
              PutUsableAt(ReadyBox(t, r, r), sg4::Engine::get_clock());
            }
          }
          sg4::Mailbox::by_name(DoneBox(rank))->put_init(Token(), 0)->detach();
        }
      })->daemonize();
      // Broadcast: each piece once usable from the parent (or the root's turn-around), to
      // every child, each over its own connection.
      std::vector<std::shared_ptr<Hop>> down;
      for (int c : node.children) {
        down.push_back(std::make_shared<Hop>(t, r, c, host(r), host(c), hop));
      }
      const int from = node.parent >= 0 ? node.parent : r;
      sg4::Actor::create("tree_down" + Edge(t, from, r), host(r),
                         [&s, t, r, rank, from, down, go] {
        Own(GoBox("down", t, rank));
        Own(ReadyBox(t, from, r));
        for (;;) {
          const PieceCut cut = Pieces(s, go("down", t, rank), t);
          for (std::uint64_t k = 0; k < cut.count; ++k) {
            const double piece = cut.Size(k);
            Take(ReadyBox(t, from, r));
            for (const auto& hop_to_child : down) hop_to_child->Send(piece);
          }
          sg4::Mailbox::by_name(DoneBox(rank))->put_init(Token(), 0)->detach();
        }
      })->daemonize();
    }
  }
  for (std::size_t rank = 0; rank < hosts; ++rank) {
    StartCollectiveRank(s, log, rank, platform.groups[rank].host,
                        [&s, rank, levels](std::uint64_t bytes) {
      Own(DoneBox(rank));
      for (int t = 0; t < 2; ++t) {
        for (const char* role : {"up", "down"}) {
          sg4::Mailbox::by_name(GoBox(role, t, rank))
              ->put_init(new std::uint64_t(bytes), 0)
              ->detach();
        }
      }
      for (int i = 0; i < 4; ++i) Receive(DoneBox(rank));
      // The levels the hosts' trees lack (tree_actors.h).
      sg4::this_actor::sleep_for(ExtraDepthSeconds(s, levels, bytes));
    });
  }
}

}  // namespace phub::sim
