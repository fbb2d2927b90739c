// HostProcess: a child process (the backend host) started with fork + execve, with one end of
// a socketpair as its descriptor 3, every other inherited descriptor closed, a process group of
// its own (signals for vramd's group, a terminal's ^C, are not its), and
// PR_SET_PDEATHSIG(SIGKILL) so that it dies with vramd (even when vramd is SIGKILLed).
//
// PR_SET_PDEATHSIG fires when the *thread* that forked ends, not the process: Spawn must be
// called from a thread that lives as long as the child should (remote/stub.h spawns from its
// supervisor thread, which reaps the child before it ends).
//
// Thread safety: one owner; Reap and Kill are safe to call more than once.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "backends/remote/unique_fd.h"
#include "core/status.h"

namespace vramd::backends::remote {

struct SpawnOptions {
  std::filesystem::path executable;
  std::vector<std::string> arguments;  // after argv[0]
  // "NAME=value" entries replacing (or adding to) vramd's own environment.
  std::vector<std::string> environment;
};

class HostProcess {
 public:
  // Starts the child with `child_socket` as its descriptor 3. Internal when fork, pidfd_open
  // fail; a failing execve shows as the child's exit status 127.
  static Result<HostProcess> Spawn(const SpawnOptions& options, const UniqueFd& child_socket);

  HostProcess() = default;
  HostProcess(HostProcess&&) noexcept;
  HostProcess& operator=(HostProcess&&) noexcept;
  ~HostProcess();  // kills and reaps a child not reaped yet

  pid_t pid() const { return pid_; }
  // Waits up to `grace` for the child to exit, then SIGKILLs it and waits; returns how it ended
  // ("exited with status 1", "was killed by signal 9 (Killed)"). Later calls return the same.
  std::string Reap(std::chrono::milliseconds grace);
  void Kill();
  bool reaped() const { return ended_.has_value(); }
  // Reaped, having exited with status 0.
  bool exited_cleanly() const { return exited_cleanly_; }

 private:
  pid_t pid_ = -1;
  UniqueFd pidfd_;
  std::optional<std::string> ended_;
  bool exited_cleanly_ = false;
};

}  // namespace vramd::backends::remote
