#include "cli/stop_signals.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>

namespace vramd::cli {
namespace {

std::atomic<int> g_write_fd{-1};

extern "C" void OnStopSignal(int sig) {
  const int saved = errno;  // the interrupted code may be about to read errno
  const int fd = g_write_fd.load();
  if (fd >= 0) {
    const unsigned char byte = static_cast<unsigned char>(sig);
    // A full pipe already holds a signal to act on; dropping this one loses nothing.
    [[maybe_unused]] ssize_t n = write(fd, &byte, 1);
  }
  errno = saved;
}

void SetAction(int sig, void (*handler)(int)) {
  struct sigaction action = {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(sig, &action, nullptr);
}

}  // namespace

StopSignals::StopSignals() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    std::perror("vramd: cannot create the signal pipe");
    std::abort();
  }
  fcntl(fds[1], F_SETFL, O_NONBLOCK);
  read_fd_ = fds[0];
  g_write_fd.store(fds[1]);
  SetAction(SIGINT, OnStopSignal);
  SetAction(SIGTERM, OnStopSignal);
  SetAction(SIGPIPE, SIG_IGN);
  // Undo a mask inherited from the parent: a blocked SIGTERM would never reach the handler.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

StopSignals::~StopSignals() { close(read_fd_); }

int StopSignals::Wait() {
  unsigned char byte = 0;
  for (;;) {
    const ssize_t n = read(read_fd_, &byte, 1);
    if (n == 1) return byte;
    if (n < 0 && errno == EINTR) continue;
    return SIGTERM;  // the pipe broke: nothing can signal any more, so stop as if asked
  }
}

}  // namespace vramd::cli
