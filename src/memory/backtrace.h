// Backtrace: the native call stack of an allocation site, captured cheaply, named late.
//
// Capture() walks the calling thread's stack with glibc backtrace() into a fixed array on the
// stack and keeps only the return addresses: 8 bytes a frame in one exact-size heap block.
// Nothing is resolved at capture time. FrameSymbolizer turns addresses into lines of the form
//
//   module(function+0xoff) [0xaddr]      e.g. vramd(vramd::memory::Allocator::Allocate(...)+0x4c) [0x55d1c2a0f1bc]
//   module(+0xoff) [0xaddr]              no symbol: the offset is from the module's load base
//
// with dladdr() and abi::__cxa_demangle(); do that only when a report is built.
//
// Cost (bench/ledger_bench.cc, docs/benchmarks.md): capture is the stack walk, roughly
// 0.1 us a frame (about 1.3 us for the ~10 frames of the benchmark on a 2-vCPU EPYC; glibc's
// first call in a process loads libgcc_s, so warm it up with one Capture before a hot path).
// Keeping a trace costs frames * 8 bytes plus one heap block. Symbolizing costs ~1-3 us a
// frame (dladdr scans the module's symbol table); FrameSymbolizer remembers addresses it has
// already named, so a report with many allocations from the same sites pays once per site.
//
// Names: dladdr sees dynamic symbols only. Functions of the main executable are named only when
// it is linked with -rdynamic (CMake ENABLE_EXPORTS); otherwise their frames show
// "module(+0xoff)", which `addr2line -f -C -e module 0xoff` resolves offline.
//
// Thread safety: Backtrace is a value type; Capture is safe from any thread. A FrameSymbolizer
// is not thread-safe (one per report being built).
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

namespace vramd::memory {

class Backtrace {
 public:
  static constexpr int kMaxFrames = 64;

  Backtrace() = default;

  // The calling thread's stack, innermost frame first, at most `max_frames` frames (clamped to
  // [0, kMaxFrames]; 0 captures nothing). When `start_at` is one of the captured return
  // addresses, the frames inside it (the capture machinery and its callers in the ledger) are
  // dropped, so the trace starts at `start_at`; pass __builtin_return_address(0) of the public
  // entry point. When it is not found, the trace starts at Capture's caller.
  static Backtrace Capture(int max_frames, const void* start_at = nullptr);

  bool empty() const { return frames_.empty(); }
  size_t size() const { return frames_.size(); }
  // Return addresses, innermost first.
  const std::vector<void*>& frames() const { return frames_; }

 private:
  std::vector<void*> frames_;
};

// Names frames, remembering the addresses it has named.
class FrameSymbolizer {
 public:
  // "module(function+0xoff) [0xaddr]" (see the file comment); "?? [0xaddr]" when the address
  // is in no loaded module. The reference stays valid until the symbolizer is destroyed.
  const std::string& Symbolize(const void* address);
  // One line per frame, innermost first.
  std::vector<std::string> Symbolize(const Backtrace& trace);

 private:
  std::unordered_map<const void*, std::string> names_;
};

}  // namespace vramd::memory
