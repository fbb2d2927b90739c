// StopSignals: SIGINT and SIGTERM as an event the server waits for, safe however many
// arrive and whenever they arrive.
//
// Blocking the signals and sigwait-ing for them only works for threads started after the
// block: a library that starts threads while it loads (OpenBLAS's pool, before main) leaves
// threads that take the default action, which kills the process. A handler instead is
// process-wide: it runs on whichever thread the kernel picks and only writes the signal's
// number to a pipe, so a signal during start-up is kept until Wait, and a second signal
// during shutdown is read and ignored.
//
// SIGPIPE is ignored from then on: a peer that closes a socket or pipe is an error value
// for the writer, not the end of the server.
//
// Thread safety: one StopSignals per process (the handler has nowhere else to write), made
// first in main; Wait from one thread.
#pragma once

namespace vramd::cli {

class StopSignals {
 public:
  StopSignals();  // installs the handlers; aborts if the pipe cannot be made (no fds at start)
  // Closes the reading end. The handlers stay until the process exits, so that a signal during
  // the last steps of exit cannot kill it either; they then write into a closed pipe.
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Blocks until a stop signal has arrived (possibly before this call); returns its number.
  int Wait();

 private:
  int read_fd_ = -1;
};

}  // namespace vramd::cli
