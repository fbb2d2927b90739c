// SystemSharedMemory: the POSIX shared-memory regions clients register (Triton's system shared
// memory extension, over HTTP and gRPC alike), so that a request's input is read from, and its
// output written into, memory the client shares with the server instead of the request body.
//
// A region is a name for [offset, offset + byte_size) of the object shm_open(key) opens. It is
// mapped once, at Register; each use takes a Slice that holds the mapping, so a region
// unregistered while a request reads or writes it stays mapped until that request lets go.
// Every offset and size is checked against the region; keys are "/name" with no other '/'.
// With a ledger, each region is client-owned host memory in it while mapped: an owner of its
// own under the server, "scope:client-shm:<name>" in /v2/memory, charged the region's bytes.
//
// Thread safety: every method may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"
#include "memory/ledger.h"

namespace vramd::shared_memory {

// Where a request's tensor is in a registered region: its shared_memory_region,
// shared_memory_offset and shared_memory_byte_size parameters (both protocols carry them).
struct TensorPlacement {
  std::string tensor;  // the input's or output's name
  std::string region;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

class SystemSharedMemory {
 public:
  // `ledger` (null: none) must outlive this object and every Slice it hands out.
  explicit SystemSharedMemory(memory::Ledger* ledger = nullptr) : ledger_(ledger) {}

  struct Region {
    std::string name;
    std::string key;
    uint64_t offset = 0;
    uint64_t byte_size = 0;
  };
  // Bytes of a registered region, mapped while `holder` lives.
  struct Slice {
    std::shared_ptr<const void> holder;
    std::byte* data = nullptr;
    size_t size = 0;
  };

  // AlreadyExists for a name in use; InvalidArgument for an empty name, a malformed key, or a
  // range beyond the object's size; NotFound when no object has that key.
  Status Register(const std::string& name, const std::string& key, uint64_t offset,
                  uint64_t byte_size) EXCLUDES(mu_);
  // "" unregisters every region. An unknown name is a success, as in Triton.
  Status Unregister(const std::string& name) EXCLUDES(mu_);
  // "" lists every region, by name; NotFound for an unknown name.
  Result<std::vector<Region>> List(const std::string& name) const EXCLUDES(mu_);
  // [offset, offset + size) of region `name`. NotFound for an unknown region; InvalidArgument
  // naming `what` when the range is not within it.
  Result<Slice> Find(const std::string& name, uint64_t offset, uint64_t size,
                     const std::string& what) const EXCLUDES(mu_);
  // Copies `bytes` (an output) to its placement; InvalidArgument naming `what` when they do
  // not fit the placement's byte_size, or its range is not within the region.
  Status Write(const TensorPlacement& placement, std::string_view bytes,
               const std::string& what) const EXCLUDES(mu_);
  // Bytes of every region registered now.
  uint64_t RegisteredBytes() const EXCLUDES(mu_);

 private:
  struct Mapping;
  struct Entry {
    Region region;
    std::shared_ptr<Mapping> mapping;
  };
  memory::Ledger* const ledger_;
  mutable Mutex mu_;
  std::map<std::string, Entry> regions_ GUARDED_BY(mu_);
};

}  // namespace vramd::shared_memory
