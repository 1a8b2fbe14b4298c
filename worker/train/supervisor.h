// phub-worker --restarts N: the process supervises itself. The training runs in a child (this
// same program, the same arguments without --restarts); a child that dies of a signal or fails
// for a reason that may pass (exit 1: a peer, a device) is started again, up to N times, and
// rejoins its job with the same rank (phubd gives it the weights and the iteration to go on
// from). Exit 0 (done) and 2 (a user error, which a restart cannot fix) end the supervisor with
// that code. SIGTERM and SIGINT are passed on to the child.
#pragma once

#include <vector>
#include <string>

namespace phub::worker {

// `args` is the program's argv without the --restarts flag. Returns the exit code to exit with.
int RunSupervised(const std::vector<std::string>& args, int restarts);

// argv without "--restarts N" / "--restarts=N".
std::vector<std::string> WithoutRestartsFlag(int argc, char** argv);

}  // namespace phub::worker
