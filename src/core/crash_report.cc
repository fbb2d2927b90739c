#include "core/crash_report.h"

#include <execinfo.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstring>

namespace vramd {
namespace {

constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
const char* g_program = "vramd";

// Only async-signal-safe calls below: write(2), no stdio, no allocation. backtrace() may load
// libgcc_s on its first call, which allocates, so InstallCrashReport calls it once beforehand.
void Put(const char* s) {
  size_t len = std::strlen(s);
  while (len > 0) {
    const ssize_t n = write(STDERR_FILENO, s, len);
    if (n <= 0) return;
    s += n;
    len -= static_cast<size_t>(n);
  }
}

void PutNumber(uintptr_t value, int base) {
  char buf[32];
  int i = sizeof(buf) - 1;
  buf[i] = '\0';
  do {
    buf[--i] = "0123456789abcdef"[value % base];
    value /= base;
  } while (value != 0 && i > 2);
  if (base == 16) {
    buf[--i] = 'x';
    buf[--i] = '0';
  }
  Put(&buf[i]);
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    default: return "signal";
  }
}

extern "C" void OnFatalSignal(int sig, siginfo_t* info, void* /*context*/) {
  char thread_name[32] = "?";
  pthread_getname_np(pthread_self(), thread_name, sizeof(thread_name));
  Put("\n");
  Put(g_program);
  Put(": fatal ");
  Put(SignalName(sig));
  Put(" (");
  PutNumber(static_cast<uintptr_t>(sig), 10);
  Put(")");
  if (sig != SIGABRT) {
    Put(" at address ");
    PutNumber(reinterpret_cast<uintptr_t>(info->si_addr), 16);
  }
  Put(" in thread '");
  Put(thread_name);
  Put("' (tid ");
  PutNumber(static_cast<uintptr_t>(syscall(SYS_gettid)), 10);
  Put("); backtrace, innermost first:\n");
  void* frames[64];
  const int depth = backtrace(frames, 64);
  backtrace_symbols_fd(frames, depth, STDERR_FILENO);
  Put(g_program);
  Put(": end of crash report\n");
  // SA_RESETHAND restored the default action; raising again (delivered once this handler
  // returns, since the signal is blocked meanwhile) ends the process as the signal would have.
  raise(sig);
}

}  // namespace

void InstallCrashReport(const char* program) {
  g_program = program;
  void* warm[1];
  backtrace(warm, 1);
  // A stack overflow leaves no stack to run the handler on; main's thread gets a spare one.
  static char alternate_stack[64 * 1024];
  stack_t ss = {};
  ss.ss_sp = alternate_stack;
  ss.ss_size = sizeof(alternate_stack);
  sigaltstack(&ss, nullptr);
  for (int sig : kFatalSignals) {
    struct sigaction action = {};
    action.sa_sigaction = OnFatalSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
    sigaction(sig, &action, nullptr);
  }
}

}  // namespace vramd
