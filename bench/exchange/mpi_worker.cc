// phub_mpi_worker: one rank of MPI_Allreduce in the `exchange` benchmark, an external baseline
// beside phub_ring_worker (same timing rule, data, check and output: allreduce_timing.h).
//
// Started by mpirun, which gives the rank and world size; each rank writes --out PREFIX
// followed by "<rank>.tsv". Each iteration: MPI_Barrier, t0, MPI_Allreduce(MPI_IN_PLACE,
// MPI_FLOAT, MPI_SUM), t1; the 1/N scaling to the mean is untimed (allreduce_timing.h says
// why). The algorithm is Open MPI's choice unless mpirun forces one, e.g. the ring:
//   --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4
// (4 = ring in Open MPI 4.1: `ompi_info --param coll tuned --level 9`); the value is copied
// into the output's first line.
//
// Errors: MPI_COMM_WORLD is set to MPI_ERRORS_RETURN, so a failed call becomes a Status here;
// then MPI_Abort ends every rank (the others would block in the next collective).
#include <CLI/CLI.hpp>
#include <mpi.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "allreduce_timing.h"

namespace {

absl::Status Check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return absl::UnavailableError(std::string(call) + " failed: " + std::string(text, len));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  phub::bench::AllreduceRun run;
  MPI_Comm_rank(MPI_COMM_WORLD, &run.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &run.world);

  std::string out_prefix;
  CLI::App app{"PHub exchange benchmark: one MPI_Allreduce rank (start with mpirun)"};
  app.add_option("--mib", run.mib, "Buffer size in MiB")->capture_default_str();
  app.add_option("--iters", run.iters)->capture_default_str();
  app.add_option("--warmup", run.warmup)->capture_default_str();
  app.add_option("--out", out_prefix, "Output prefix; rank r writes PREFIX<r>.tsv")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    MPI_Finalize();
    return code;
  }
  run.out_path = out_prefix + std::to_string(run.rank) + ".tsv";
  const char* forced = std::getenv("OMPI_MCA_coll_tuned_allreduce_algorithm");
  run.label = std::string("phub_mpi_worker coll_tuned_allreduce_algorithm=") +
              (forced != nullptr ? forced : "default");

  std::vector<float> data = phub::bench::InitialData(run);
  const int count = static_cast<int>(data.size());
  const int code = phub::bench::RunTimedAllreduce(
      run, data, [] { return Check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); },
      [&] {
        return Check(MPI_Allreduce(MPI_IN_PLACE, data.data(), count, MPI_FLOAT, MPI_SUM,
                                   MPI_COMM_WORLD),
                     "MPI_Allreduce");
      });
  if (code == 3) MPI_Abort(MPI_COMM_WORLD, code);
  MPI_Finalize();
  return code;
}
