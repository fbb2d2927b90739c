#include "runtime/model_lifecycle.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace vramd::runtime {

std::string_view LifecycleStateName(LifecycleState state) {
  switch (state) {
    case LifecycleState::kUnloaded: return "unloaded";
    case LifecycleState::kLoading: return "loading";
    case LifecycleState::kReady: return "ready";
    case LifecycleState::kDraining: return "draining";
    case LifecycleState::kUnloading: return "unloading";
    case LifecycleState::kFailed: return "failed";
  }
  return "unknown";
}

std::string_view TritonStateName(LifecycleState state) {
  switch (state) {
    case LifecycleState::kReady: return "READY";
    case LifecycleState::kLoading: return "LOADING";
    case LifecycleState::kDraining:
    case LifecycleState::kUnloading: return "UNLOADING";
    case LifecycleState::kUnloaded:
    case LifecycleState::kFailed: return "UNAVAILABLE";
  }
  return "UNAVAILABLE";
}

bool ModelLifecycle::Allowed(LifecycleState from, LifecycleState to) {
  using S = LifecycleState;
  switch (from) {
    case S::kUnloaded: return to == S::kLoading;
    // A load that fails while older versions serve goes back to ready.
    case S::kLoading: return to == S::kReady || to == S::kFailed;
    case S::kReady: return to == S::kLoading || to == S::kDraining;
    case S::kDraining: return to == S::kUnloading;
    // Loading after unloading is the second half of a resource-preserving reload.
    case S::kUnloading: return to == S::kUnloaded || to == S::kLoading;
    case S::kFailed: return to == S::kLoading || to == S::kUnloaded;
  }
  return false;
}

Status ModelLifecycle::Transition(LifecycleState to, std::string reason) {
  if (!Allowed(state_, to)) {
    return Status::Internal(fmt::format("model lifecycle: no transition from {} to {}",
                                        LifecycleStateName(state_), LifecycleStateName(to)));
  }
  history_.push_back({state_, to, reason, std::chrono::system_clock::now()});
  if (history_.size() > kHistory) history_.pop_front();
  state_ = to;
  reason_ = std::move(reason);
  return Status::Ok();
}

bool ModelLifecycle::TransitionOrLog(std::string_view model, std::span<const int64_t> versions,
                                     LifecycleState to, std::string reason) {
  const LifecycleState from = state_;
  Status moved = Transition(to, reason);
  if (moved.ok()) return true;
  spdlog::error("model '{}'{}{}: lifecycle transition from {} to {} refused (reason '{}'); it "
                "stays {}",
                model, versions.empty() ? "" : " version(s) ", fmt::join(versions, ","),
                LifecycleStateName(from), LifecycleStateName(to), reason,
                LifecycleStateName(state_));
  return false;
}

}  // namespace vramd::runtime
