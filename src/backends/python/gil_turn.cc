#include "gil_turn.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

namespace vramd::python {
namespace {

// As the scheduler's idle spin (src/runtime/scheduler.h): on a small machine the spinning
// thread would take the core the holder, the client or an HTTP thread needs.
constexpr long kDefaultSpinUs = 50;
constexpr unsigned kSpinMinCpus = 8;

// When the current execute holder took the GIL (steady-clock ns, never 0); 0: none holds it.
std::atomic<int64_t> g_held_since{0};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
             .count() + 1;  // never 0
}

inline void Pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

int64_t GilSpinBudgetNs() {
  static const int64_t budget = [] {
    const char* text = std::getenv("VRAMD_PYTHON_GIL_SPIN_US");
    long us = kDefaultSpinUs;
    if (text != nullptr) {
      us = std::strtol(text, nullptr, 10);
    } else if (std::thread::hardware_concurrency() < kSpinMinCpus) {
      us = 0;
    }
    return static_cast<int64_t>(std::clamp(us, 0L, 10000L)) * 1000;
  }();
  return budget;
}

ExecuteGil::ExecuteGil() {
  if (const int64_t budget = GilSpinBudgetNs(); budget > 0) {
    const int64_t deadline = NowNs() + budget;
    for (int64_t since = g_held_since.load(std::memory_order_acquire); since != 0;
         since = g_held_since.load(std::memory_order_acquire)) {
      const int64_t now = NowNs();
      if (now >= deadline || now - since >= budget) break;
      Pause();
    }
  }
  gil_.emplace();
  mark_ = NowNs();
  g_held_since.store(mark_, std::memory_order_release);
}

ExecuteGil::~ExecuteGil() {
  gil_.reset();
  // Cleared only if it is still this holder's: the next one may have marked it meanwhile.
  int64_t expected = mark_;
  g_held_since.compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
}

}  // namespace vramd::python
