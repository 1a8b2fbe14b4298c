// A job's shards installed on every core (Job::InstallShards, Installed, AbandonInstall): the
// step of its start (job_start.cc) that takes time, every chunk's slots, weights and optimizer
// state allocated and first touched on its core (a 2,000 MiB model on 2 cores took 11 s on the
// 2-core VM). It runs on an installer thread, every core at once, while the control plane goes on:
// the forming members keep getting their Heartbeats (a worker gives up on a silent phubd after
// --hello-answer-timeout-ms, 10 s by default) and other jobs are served as before. Meanwhile
// the job is starting: a Hello joins it as in forming (a rank given back meanwhile may be
// taken again; an elastic job's extra ranks become joiners at the Welcome), and a member that
// leaves fails the start once the install is in (JOB_STALLED, naming it).
#include <boost/asio/post.hpp>
#include <chrono>
#include <system_error>
#include <thread>

#include "absl/strings/str_cat.h"
#include "phub/server/admission/hello_check.h"
#include "phub/server/job/job.h"
#include "phub/server/job/job_start_plan.h"
#include "spdlog/spdlog.h"

namespace phub::server {

namespace asio = boost::asio;

struct Job::Install {
  std::thread thread;
  std::unique_ptr<StartPlan> plan;
  Status status;  // the installer's: written before it posts Installed, read after the join
  std::chrono::steady_clock::time_point began;
};

namespace {

// Every core's shard at once, each built by its core's lane (ServerCore::InstallShard): all or
// none. `delay_ms`: --test-install-delay-ms, each core's install that much slower.
Status InstallOnEveryCore(std::vector<std::unique_ptr<ServerCore>>& cores,
                          const std::shared_ptr<const JobSpec>& spec, const Shard::EventSink& sink,
                          double weight, int delay_ms) {
  std::vector<Status> status(cores.size(), absl::OkStatus());
  {
    std::vector<std::jthread> each;
    each.reserve(cores.size());
    for (std::size_t c = 0; c < cores.size(); ++c) {
      try {
        each.emplace_back([&, c] {
          if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
          status[c] = cores[c]->InstallShard(spec, sink, weight);
        });
      } catch (const std::system_error& e) {
        status[c] = absl::ResourceExhaustedError(
            absl::StrCat("core ", c, ": no thread to install the job with: ", e.what()));
      }
    }
  }  // every thread joined
  for (const Status& s : status) {
    if (s.ok()) continue;
    // All or none: the cores that took theirs give them back.
    for (auto& core : cores) core->RemoveShard(spec->session);
    return s;
  }
  return absl::OkStatus();
}

}  // namespace

void Job::InstallShards(std::unique_ptr<StartPlan> plan) {
  auto sink = [io = &host_.io, weak = weak_from_this()](ShardEvent event) {
    asio::post(*io, [weak, event = std::move(event)] {
      if (auto self = weak.lock(); self && !self->ended_) self->OnShardEvent(event);
    });
  };
  const std::shared_ptr<const JobSpec> spec = plan->spec;
  install_ = std::make_shared<Install>();
  Install* install = install_.get();  // outlives the thread: ~Job and End join it first
  install->plan = std::move(plan);
  install->began = std::chrono::steady_clock::now();
  starting_ = true;
  try {
    install->thread = std::thread(
        [install, spec, sink = std::move(sink), cores = &host_.cores, io = &host_.io,
         weight = weight_, delay = options().test_install_delay_ms, weak = weak_from_this()] {
          install->status = InstallOnEveryCore(*cores, spec, sink, weight, delay);
          asio::post(*io, [weak] {
            if (auto self = weak.lock()) self->Installed();
          });
        });
  } catch (const std::system_error& e) {
    install_.reset();
    starting_ = false;
    FailForming(
        MakeError(proto::Error::RESOURCE_EXHAUSTED,
                  absl::StrCat("phubd has no thread to install ", log_name_, ": ", e.what()),
                  "fewer jobs at once, or raise the process's thread limit"));
  }
}

void Job::Installed() {
  if (!install_) return;  // abandoned: phubd is stopping
  install_->thread.join();
  const Status status = install_->status;
  std::unique_ptr<StartPlan> plan = std::move(install_->plan);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - install_->began).count();
  install_.reset();
  starting_ = false;
  if (!status.ok()) {
    const bool memory = absl::IsResourceExhausted(status);
    return FailForming(MakeError(
        memory ? proto::Error::RESOURCE_EXHAUSTED : proto::Error::BAD_REQUEST,
        std::string(status.message()),
        memory ? "a smaller model, or lower --memory-budget-bytes (or --max-model-bytes) so such "
                 "jobs are refused up front"
               : "see phubd's log; on verbs check the memlock limit (ulimit -l)"));
  }
  // An operator wants to know where a slow start went; a quick one is not news.
  spdlog::log(seconds >= 1 ? spdlog::level::info : spdlog::level::debug,
              "{}: its shards are installed on {} cores in {:.2f} s", log_name_, host_.cores.size(),
              seconds);
  // A member it starts with that left meanwhile (its rank not taken again since).
  std::string gone;
  const std::uint32_t needed = elastic_.enabled ? elastic_.start : world_size_;
  for (std::uint32_t r = 0; r < needed; ++r) {
    if (!members_[r]) absl::StrAppend(&gone, gone.empty() ? "" : ", ", r);
  }
  if (!gone.empty()) {
    for (auto& core : host_.cores) core->RemoveShard(plan->spec->session);
    if (joined_ == 0) return End();
    return FailForming(MakeError(
        proto::Error::JOB_STALLED,
        absl::StrCat("rank(s) ", gone, " of ", log_name_, " left while phubd installed it"),
        "start the job again, every worker"));
  }
  if (auto refusal = OpenCheckpoints(*plan)) return FailForming(*refusal);
  Run(*plan, plan->hello);
}

void Job::AbandonInstall() {
  if (!install_) return;
  install_->thread.join();
  if (install_->status.ok()) {
    for (auto& core : host_.cores) core->RemoveShard(install_->plan->spec->session);
  }
  install_.reset();
  starting_ = false;
}

}  // namespace phub::server
