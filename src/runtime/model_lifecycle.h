// ModelLifecycle: the state of one model's loading and unloading, with the reason for it and
// the recent transitions, as ../../docs/model-control.md describes.
//
//   unloaded --Load--> loading --ok--> ready --Unload--> draining --> unloading --> unloaded
//                         |  ^            |                                   |
//                         |  +--reload----+  (availability-preserving: the    |
//                         |                   serving versions serve on)      |
//                         +--error--> failed              resource-preserving reload:
//                                                         ready --> draining --> unloading
//                                                           --> loading (nothing serves)
//
//   - loading: a load is running. Versions already serving keep serving (availability-
//     preserving reload), or none serves (first load, resource-preserving reload).
//   - ready: at least one version serves.
//   - draining: the serving versions take no new request and run what they hold.
//   - unloading: the backend's unload hooks run, the ledger owners close, pools are trimmed.
//   - unloaded: nothing is loaded (also the state before the first load).
//   - failed: the last load failed and nothing serves. A failed reload while the old versions
//     keep serving goes back to ready, with the failure as the reason.
//
// Transition refuses a move the picture does not allow (an Internal error naming both states)
// instead of aborting, and the model stays as it was. The manager moves a model only through
// TransitionOrLog, which logs a refusal (a manager bug, never the client's doing) with the
// model, the versions its action is about, both states and the reason the move would have had.
//
// Thread safety: none; the manager guards each model's lifecycle with its own lock.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace vramd::runtime {

enum class LifecycleState { kUnloaded, kLoading, kReady, kDraining, kUnloading, kFailed };

// "unloaded", "loading", "ready", "draining", "unloading", "failed".
std::string_view LifecycleStateName(LifecycleState state);

// The state Triton's repository index would show: "READY", "LOADING", "UNLOADING" (draining
// and unloading) or "UNAVAILABLE" (unloaded, failed).
std::string_view TritonStateName(LifecycleState state);

struct LifecycleTransition {
  LifecycleState from = LifecycleState::kUnloaded;
  LifecycleState to = LifecycleState::kUnloaded;
  std::string reason;
  std::chrono::system_clock::time_point at;
};

class ModelLifecycle {
 public:
  // The number of transitions history() keeps, newest last.
  static constexpr size_t kHistory = 32;

  LifecycleState state() const { return state_; }
  // Why the model is in its state: empty when ready and nothing went wrong; the error of a
  // failed load (also while ready, when the old versions kept serving); "unloaded" after Unload.
  const std::string& reason() const { return reason_; }

  static bool Allowed(LifecycleState from, LifecycleState to);

  // Moves to `to` with `reason`; Internal, naming both states, when Allowed says no.
  Status Transition(LifecycleState to, std::string reason = "");

  // Transition, logging a refusal as an error that names `model` and `versions` (those the
  // action moving it is about; none for an action on the model alone). The log's formatter
  // escapes the names (core/log_format.h). Whether the model moved.
  bool TransitionOrLog(std::string_view model, std::span<const int64_t> versions,
                       LifecycleState to, std::string reason = "");

  // Changes the reason only (e.g. a failed reload while ready).
  void set_reason(std::string reason) { reason_ = std::move(reason); }

  const std::deque<LifecycleTransition>& history() const { return history_; }

 private:
  LifecycleState state_ = LifecycleState::kUnloaded;
  std::string reason_;
  std::deque<LifecycleTransition> history_;
};

}  // namespace vramd::runtime
