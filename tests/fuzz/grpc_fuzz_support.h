// What the gRPC fuzz targets (grpc_*_fuzzer.cc) share: the shared-memory regions a client
// would have registered, the start-up that keeps protobuf quiet, and reading an answer back as
// gRPC would send it. Header-only: only those targets link gRPC.
//
// Thread safety: as fuzz_support.h (one input at a time).
#pragma once

#include <fcntl.h>
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/support/byte_buffer.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_support.h"
#include "server/grpc/grpc_service.pb.h"
#include "server/shared_memory/shared_memory_regions.h"

namespace vramd::fuzz {

// Two system regions of kBytes each, registered as a client would: "in" and "out", back to back
// in one POSIX object that is unlinked with this object (the regions keep their mappings).
class ClientRegions {
 public:
  static constexpr size_t kBytes = 256;

  // `tag` names the object (with the process id), so targets running side by side never meet.
  explicit ClientRegions(const std::string& tag)
      : key_("/vramd-" + tag + "-" + std::to_string(::getpid())) {
    const int fd = ::shm_open(key_.c_str(), O_CREAT | O_RDWR | O_EXCL, 0600);
    if (fd < 0 || ::ftruncate(fd, 2 * kBytes) != 0) Fail("cannot make " + key_);
    ::close(fd);
    for (const auto& [name, index] : {std::pair{"in", 0}, std::pair{"out", 1}}) {
      auto s = regions_.RegisterSystem(name, key_, index * kBytes, kBytes);
      if (!s.ok()) Fail("cannot register region " + std::string(name) + ": " + s.ToString());
    }
  }
  ~ClientRegions() { ::shm_unlink(key_.c_str()); }
  ClientRegions(const ClientRegions&) = delete;
  ClientRegions& operator=(const ClientRegions&) = delete;

  // Puts the contents each input starts from: "in" holds 0..255, "out" zeros.
  void Reset() {
    std::byte* in = Bytes("in");
    for (size_t i = 0; i < kBytes; ++i) in[i] = static_cast<std::byte>(i);
    std::memset(Bytes("out"), 0, kBytes);
  }
  // The first byte of region `name` in this process.
  std::byte* Bytes(const std::string& name) const {
    auto slice = regions_.Find(name, 0, kBytes, "the fuzzer's region");
    if (!slice.ok()) Fail("the fuzzer's region is gone: " + slice.status().ToString());
    return slice->data;
  }
  shared_memory::SharedMemoryRegions* get() { return &regions_; }
  const shared_memory::SharedMemoryRegions* get() const { return &regions_; }

 private:
  const std::string key_;
  shared_memory::SharedMemoryRegions regions_;
};

// Protobuf logs each malformed string field it parses, which would drown libFuzzer's output.
inline void SilenceProtobuf() { google::protobuf::SetLogHandler(nullptr); }

// `wire`, an answer as gRPC would send it, parsed as a ModelInferResponse; Fail if it is not one.
inline inference::ModelInferResponse ReadBack(const grpc::ByteBuffer& wire) {
  std::vector<grpc::Slice> slices;
  if (!wire.Dump(&slices).ok()) Fail("the answer's buffer does not dump");
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  inference::ModelInferResponse back;
  if (!back.ParseFromString(bytes)) Fail("the answer does not parse as a ModelInferResponse");
  return back;
}

}  // namespace vramd::fuzz
