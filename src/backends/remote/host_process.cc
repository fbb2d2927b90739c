#include "backends/remote/host_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <utility>

extern char** environ;

namespace vramd::backends::remote {
namespace {

std::string Errno(const char* what) { return fmt::format("{}: {}", what, std::strerror(errno)); }

std::string DescribeStatus(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = ::strsignal(sig);
    return fmt::format("was killed by signal {} ({})", sig, name != nullptr ? name : "?");
  }
  return fmt::format("ended with wait status {}", status);
}

}  // namespace

Result<HostProcess> HostProcess::Spawn(const SpawnOptions& options, const UniqueFd& child_socket) {
  // Everything the child needs is built before fork: after it, in a process with threads, only
  // async-signal-safe calls are allowed.
  std::vector<std::string> args;
  args.push_back(options.executable.string());
  args.insert(args.end(), options.arguments.begin(), options.arguments.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    env[entry.substr(0, entry.find('='))] = entry;
  }
  for (const std::string& entry : options.environment) env[entry.substr(0, entry.find('='))] = entry;
  std::vector<char*> envp;
  for (auto& [name, entry] : env) envp.push_back(entry.data());
  envp.push_back(nullptr);

  const pid_t parent = ::getpid();
  const int socket = child_socket.get();
  const pid_t pid = ::fork();
  if (pid < 0) return Status::Internal(Errno("fork"));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);  // vramd died before the line above
    // A group of its own: a terminal's SIGINT (or a supervisor's SIGTERM to vramd's group) is
    // for vramd, which then drains and ends the host itself.
    ::setpgid(0, 0);
    if (::dup2(socket, 3) < 0) ::_exit(125);  // dup2 clears close-on-exec on 3
    ::syscall(SYS_close_range, 4u, ~0u, 0u);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  HostProcess process;
  process.pid_ = pid;
  process.pidfd_ = UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!process.pidfd_.valid()) {
    const std::string why = Errno("pidfd_open");
    process.Kill();
    process.Reap(std::chrono::milliseconds(0));
    return Status::Internal(why);
  }
  return process;
}

HostProcess::HostProcess(HostProcess&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)),
      pidfd_(std::move(o.pidfd_)),
      ended_(std::move(o.ended_)),
      exited_cleanly_(o.exited_cleanly_) {}

HostProcess& HostProcess::operator=(HostProcess&& o) noexcept {
  if (this != &o) {
    if (pid_ > 0 && !ended_) {
      Kill();
      Reap(std::chrono::milliseconds(0));
    }
    pid_ = std::exchange(o.pid_, -1);
    pidfd_ = std::move(o.pidfd_);
    ended_ = std::move(o.ended_);
    exited_cleanly_ = o.exited_cleanly_;
  }
  return *this;
}

HostProcess::~HostProcess() {
  if (pid_ > 0 && !ended_) {
    Kill();
    Reap(std::chrono::milliseconds(0));
  }
}

void HostProcess::Kill() {
  if (pid_ <= 0 || ended_) return;
  // Through the pidfd where there is one: it cannot hit a reused pid.
  if (pidfd_.valid()) {
    ::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
  } else {
    ::kill(pid_, SIGKILL);
  }
}

std::string HostProcess::Reap(std::chrono::milliseconds grace) {
  if (ended_) return *ended_;
  if (pid_ <= 0) return "was never started";
  if (pidfd_.valid()) {
    pollfd p{pidfd_.get(), POLLIN, 0};
    int n;
    do {
      n = ::poll(&p, 1, static_cast<int>(grace.count()));
    } while (n < 0 && errno == EINTR);
    if (n == 0) Kill();  // still running after the grace period
  } else {
    Kill();
  }
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, 0);
  } while (r < 0 && errno == EINTR);
  ended_ = r == pid_ ? DescribeStatus(status) : Errno("waitpid");
  exited_cleanly_ = r == pid_ && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return *ended_;
}

}  // namespace vramd::backends::remote
