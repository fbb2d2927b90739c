// CUDA IPC over vramd's device memory: how a backend host process (backends/remote/stub.h)
// uses memory from the server's pools, so that what it allocates on a GPU is charged in the
// server's ledger like an in-process backend's, with no copy.
//
// The server exports the cudaMalloc allocation (a pool segment) that holds a pointer: its
// handle and the pointer's offset in it. The host opens the handle, which maps the whole
// segment into its address space, and uses base + offset. CUDA counts opens of one handle in
// a process (a second open returns the same base), and each ImportedMemory is one open.
//
// The rule that keeps this safe (CUDA: freeing an exported allocation while another process
// has it open is undefined behaviour): the importer closes its mapping before it tells the
// exporter it is done with the memory, and the exporter frees only after hearing that. A pool
// segment goes back to the driver only once no allocation in it is live, so a segment a host
// has open is never freed under it. A host that dies loses its mappings with its context.
//
// Built without CUDA, or with no device, every call is Unavailable; nothing crashes.
//
// Thread safety: the functions are safe from any thread; an ImportedMemory is immutable.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/status.h"

namespace vramd::memory {

// cudaIpcMemHandle_t's bytes (CUDA_IPC_HANDLE_SIZE).
inline constexpr size_t kIpcHandleBytes = 64;
using IpcHandle = std::array<std::byte, kIpcHandleBytes>;

struct IpcExport {
  IpcHandle handle{};   // of the allocation that holds the pointer
  uint64_t offset = 0;  // of the pointer from the allocation's start
};

// The export of `ptr`, device memory of CUDA device `ordinal` inside a cudaMalloc allocation
// (any pointer into it, not only its start). Unavailable without CUDA; InvalidArgument for a
// pointer CUDA does not know; Internal naming the CUDA error otherwise.
Result<IpcExport> ExportDeviceMemory(int ordinal, const void* ptr);

// One open of another process's exported allocation on device `ordinal`; closed when
// destroyed.
class ImportedMemory {
 public:
  static Result<std::unique_ptr<ImportedMemory>> Open(int ordinal, const IpcHandle& handle);
  ~ImportedMemory();
  ImportedMemory(const ImportedMemory&) = delete;
  ImportedMemory& operator=(const ImportedMemory&) = delete;

  // Where the allocation starts in this process.
  std::byte* base() const { return base_; }
  int ordinal() const { return ordinal_; }
  // Bytes of the allocation from base(), as the driver reports them; 0 when it cannot tell.
  size_t size() const { return size_; }

 private:
  ImportedMemory(int ordinal, std::byte* base, size_t size)
      : ordinal_(ordinal), base_(base), size_(size) {}
  const int ordinal_;
  std::byte* const base_;
  const size_t size_;
};

}  // namespace vramd::memory
