#include "memory/backtrace.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace vramd::memory {
namespace {

// Room for the frames asked for plus the ledger's own frames above the allocation site.
constexpr int kCaptureSlack = 8;

std::string_view Basename(const char* path) {
  std::string_view p(path);
  size_t slash = p.rfind('/');
  return slash == std::string_view::npos ? p : p.substr(slash + 1);
}

std::string Demangle(const char* symbol) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(symbol, nullptr, nullptr, &status);
  if (status != 0 || demangled == nullptr) return symbol;
  std::string out(demangled);
  std::free(demangled);
  return out;
}

std::string Hex(uintptr_t value) {
  char buf[2 + 16 + 1];
  std::snprintf(buf, sizeof(buf), "0x%jx", static_cast<uintmax_t>(value));
  return buf;
}

std::string NameFrame(const void* address) {
  auto addr = reinterpret_cast<uintptr_t>(address);
  // A return address points after the call; look up the call itself so that a call that ends a
  // function (noreturn, or the last instruction) is not named after the next function.
  Dl_info info{};
  if (addr == 0 || dladdr(reinterpret_cast<const void*>(addr - 1), &info) == 0 ||
      info.dli_fname == nullptr) {
    return "?? [" + Hex(addr) + "]";
  }
  std::string out(Basename(info.dli_fname));
  out += '(';
  if (info.dli_sname != nullptr) {
    out += Demangle(info.dli_sname);
    out += '+';
    out += Hex(addr - reinterpret_cast<uintptr_t>(info.dli_saddr));
  } else {
    out += '+';
    out += Hex(addr - reinterpret_cast<uintptr_t>(info.dli_fbase));
  }
  out += ") [";
  out += Hex(addr);
  out += ']';
  return out;
}

}  // namespace

// noinline: frame 0 of backtrace() must be Capture itself, so that it can be dropped.
__attribute__((noinline)) Backtrace Backtrace::Capture(int max_frames, const void* start_at) {
  Backtrace trace;
  max_frames = std::clamp(max_frames, 0, kMaxFrames);
  if (max_frames == 0) return trace;
  void* frames[kMaxFrames + kCaptureSlack];
  int n = backtrace(frames, kMaxFrames + kCaptureSlack);
  int first = n > 0 ? 1 : 0;  // skip Capture's own frame
  if (start_at != nullptr) {
    for (int i = 0; i < n; ++i) {
      if (frames[i] == start_at) {
        first = i;
        break;
      }
    }
  }
  int last = std::min(n, first + max_frames);
  trace.frames_.assign(frames + first, frames + last);
  return trace;
}

const std::string& FrameSymbolizer::Symbolize(const void* address) {
  auto it = names_.find(address);
  if (it == names_.end()) it = names_.emplace(address, NameFrame(address)).first;
  return it->second;
}

std::vector<std::string> FrameSymbolizer::Symbolize(const Backtrace& trace) {
  std::vector<std::string> lines;
  lines.reserve(trace.size());
  for (const void* frame : trace.frames()) lines.push_back(Symbolize(frame));
  return lines;
}

}  // namespace vramd::memory
