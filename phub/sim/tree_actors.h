// NCCL's double binary tree allreduce (its "tree" algorithm; the trees of src/graph/trees.cc)
// on the simulated platform. Two binary trees over the N ranks, each carrying half of every
// bucket (collective_rank.h): tree 0 is ncclGetBtree's (rank 0 the root with one child, the
// odd ranks the leaves), tree 1 its mirror (N even) or tree 0 shifted by one rank (N odd), so
// a leaf of one tree is an interior node of the other (for odd N one rank is interior in
// both; its link still carries 2 S). Each half is cut into pieces
// (tree_piece_bytes); a rank sends a piece to its parent once its children's copies are in, the
// root turns the sum around, and each rank passes it on to its children: reduce up and
// broadcast down, piece after piece, so the pieces pipeline. A rank with two children in one
// tree and none in the other sends (and receives) S / 2 + 2 S / 2 + S / 2 = 2 S, the ring's
// 2 (N - 1) / N S; what the tree saves is latency: a piece crosses 2 x depth hops, depth
// ~ log2 N, where the ring's S crosses 2 (N - 1).
//
// A hop is a connection: its pieces leave back to back at the links' share, and each is
// usable by the receiver one hop latency (2 x latency_us: the sender's link, then the
// receiver's) after its last byte arrived, as NCCL's eight slots a connection keep pieces in
// flight across the latency. So the tree's links are built without latency (platform.cc) and
// the hops add it.
//
// N ranks on at most max_worker_hosts hosts (H): every rank's link carries the same 2 S
// however large the tree (N >= 4), so the H-rank trees' links are an N-rank tree's; what N adds
// is depth, each level one more hop up and one more down for every piece, which lengthens the
// pipeline's fill and drain (the links near the root wait for the first pieces to climb, the
// leaves for the last to come down). Each rank's allreduce of a bucket is the H-rank trees'
// followed by ExtraDepthSeconds, those levels' hops. Not a delay of every piece in the
// simulation: the root holding each piece back lets the reductions run ahead on the links the
// broadcasts leave free, and absorbed 1.1 ms of it entirely, where the real levels' time is
// not absorbed (N = 256 whole takes 4 p / B a level more than N = 64). Tested against the
// trees simulated whole (tests/phub/sim/simulate_test.cc).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "phub/sim/iteration_log.h"
#include "phub/sim/platform.h"
#include "phub/sim/scenario.h"

namespace phub::sim {

struct TreeNode {
  int parent = -1;  // -1: the root
  std::vector<int> children;  // at most 2, in rank order
};
using Tree = std::vector<TreeNode>;  // by rank

// NCCL's two trees over `n` ranks.
std::array<Tree, 2> DoubleBinaryTree(std::uint32_t n);
// Hops from the root to the deepest leaf.
std::uint32_t Depth(const Tree& tree);
// The bytes the busiest rank sends an iteration (it receives as many): the children's and
// the parent's copies of its half in each tree.
double TreeBytesPerWorker(const Scenario& scenario);
// The hop latency in seconds (two links' latency_us).
double TreeHopSeconds(const Scenario& scenario);
// The levels the trees of `workers` ranks have more than those of `hosts` (the deeper tree's).
std::uint32_t ExtraLevels(std::uint32_t workers, std::uint32_t hosts);
// What `levels` more add to an allreduce of `bytes`: 2 hops (up and down) a level, each the
// hop latency and a piece's time on a link shared with its sibling's copy (2 p / B).
double ExtraDepthSeconds(const Scenario& scenario, std::uint32_t levels, std::uint64_t bytes);

void StartTreeActors(const Scenario& scenario, const Platform& platform, IterationLog& log);

}  // namespace phub::sim
