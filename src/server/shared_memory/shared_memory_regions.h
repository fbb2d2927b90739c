// SharedMemoryRegions: the memory clients register so that a request's input is read from, and
// its output written into, memory the client shares with the server instead of the request
// body (Triton's system and CUDA shared memory extensions, over HTTP and gRPC alike).
//
// Two kinds, one namespace of region names (as in Triton, a name is registered once, whatever
// its kind):
//  - system: [offset, offset + byte_size) of the POSIX object shm_open(key) opens, mapped once
//    at RegisterSystem. Keys are "/name" with no other '/'.
//  - CUDA: byte_size bytes at the start of the allocation a client exported with
//    cudaIpcGetMemHandle, opened once at RegisterCuda (memory::ImportedMemory) on a device this
//    process uses. A request's tensor there reaches a backend as a GPU tensor (core/tensor.h).
// Each use takes a Slice that holds the mapping or the import, so a region unregistered while
// a request reads or writes it stays open until that request lets go. Every offset and size is
// checked against the region.
//
// With a ledger, each region is client-owned memory in it while open: an owner of its own under
// the server, "scope:client-shm:<name>" (system) or "scope:client-cudashm:<name>" (CUDA) in
// /v2/memory, charged the region's bytes on the host or on the region's GPU, so a client's
// buffer is never counted as the server's own nor shown as unattributed.
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
#include "core/infer_request.h"
#include "core/tensor.h"
#include "memory/cuda_ipc.h"
#include "memory/device_contexts.h"
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

enum class RegionKind { kSystem, kCuda };

// "system" or "CUDA", as messages name a kind.
std::string_view RegionKindName(RegionKind kind);

// A client's cudaIpcMemHandle_t as it arrives (raw_handle): exactly memory::kIpcHandleBytes.
// InvalidArgument naming `what` otherwise.
Result<memory::IpcHandle> ToIpcHandle(std::string_view raw, std::string_view what);

class SharedMemoryRegions {
 public:
  // `ledger` (null: none) must outlive this object and every Slice it hands out; `contexts`
  // (null: none) makes and measures a GPU's context before a region is first opened there.
  explicit SharedMemoryRegions(memory::Ledger* ledger = nullptr,
                               memory::DeviceContexts* contexts = nullptr)
      : ledger_(ledger), contexts_(contexts) {}

  struct Region {
    std::string name;
    RegionKind kind = RegionKind::kSystem;
    std::string key;      // system
    uint64_t offset = 0;  // system: within the object
    uint64_t byte_size = 0;
    int device_id = kOnHost;  // CUDA: the device of the allocation
  };
  // Bytes of a registered region, open while `holder` lives: host memory, or device memory of
  // CUDA device `gpu`.
  struct Slice {
    std::shared_ptr<const void> holder;
    std::byte* data = nullptr;
    size_t size = 0;
    int gpu = kOnHost;
  };

  // AlreadyExists for a name in use (of either kind); InvalidArgument for an empty name, a
  // malformed key, or a range beyond the object's size; NotFound when no object has that key.
  Status RegisterSystem(const std::string& name, const std::string& key, uint64_t offset,
                        uint64_t byte_size) EXCLUDES(mu_);
  // AlreadyExists as above; InvalidArgument for an empty name, byte_size 0, or a device this
  // process does not use (every device, without CUDA); InvalidArgument naming CUDA's error when
  // the handle cannot be opened on `device_id`.
  Status RegisterCuda(const std::string& name, const memory::IpcHandle& handle, int device_id,
                      uint64_t byte_size) EXCLUDES(mu_);
  // Unregisters region `name` of `kind` ("": every region of that kind). A name unknown, or
  // registered as the other kind, is left alone and is a success, as in Triton.
  Status Unregister(RegionKind kind, const std::string& name) EXCLUDES(mu_);
  // The regions of `kind` ("": all of them, by name); NotFound when `name` is not one of them.
  Result<std::vector<Region>> List(RegionKind kind, const std::string& name) const EXCLUDES(mu_);
  // [offset, offset + size) of region `name`, of either kind. NotFound for an unknown region;
  // InvalidArgument naming `what` when the range is not within it.
  Result<Slice> Find(const std::string& name, uint64_t offset, uint64_t size,
                     const std::string& what) const EXCLUDES(mu_);
  // Whether `name` is a registered CUDA region (a front end then lets outputs stay on a GPU).
  bool IsCuda(const std::string& name) const EXCLUDES(mu_);
  // Copies `output` (host or GPU) to its placement (nothing when the backend wrote it there,
  // PlacedOutputBuffers); InvalidArgument naming `what` when its
  // bytes do not fit the placement's byte_size, or its range is not within the region;
  // Internal (or Unavailable without CUDA) when a copy touching a GPU fails.
  Status Write(const TensorPlacement& placement, const Tensor& output,
               const std::string& what) const EXCLUDES(mu_);
  // Bytes of every region of `kind` registered now.
  uint64_t RegisteredBytes(RegionKind kind) const EXCLUDES(mu_);

 private:
  struct Opened;  // a mapping or an import, and its charge in the ledger
  struct Entry {
    Region region;
    std::shared_ptr<Opened> opened;
    std::byte* base = nullptr;  // the region's first byte in this process
  };
  // Inserts an opened region; AlreadyExists when its name was taken meanwhile.
  Status Insert(Entry entry) EXCLUDES(mu_);
  // Charges `opened` for `region` in the ledger, if there is one.
  void Charge(const Region& region, Opened* opened) const;

  memory::Ledger* const ledger_;
  memory::DeviceContexts* const contexts_;
  mutable Mutex mu_;
  std::map<std::string, Entry> regions_ GUARDED_BY(mu_);
};

// The placement of output `name` among `placed` (null: none), or null.
const TensorPlacement* PlacementOf(const std::vector<TensorPlacement>* placed,
                                   std::string_view name);

// Input `tensor` (name, datatype and shape set) reads its bytes at `placement`, in place: the
// tensor holds the region open, and in a CUDA region it is a GPU tensor. BYTES in a CUDA region
// come to the host, where their elements are split and checked. InvalidArgument when the
// placement's byte_size is not what the shape needs, or the BYTES elements do not fit it.
Status AttachInput(const SharedMemoryRegions& regions, const TensorPlacement& placement,
                   Tensor* tensor);

// For InferRequest::output_buffer: each output `placed` names gets its placement's first
// byte_size bytes in `regions` (when it fits), so a backend can write it there directly; the
// front end's Write then copies nothing. Not an output whose bytes would overlap one of
// `inputs` (the request's, read in place from a region): a backend writing it while it still
// reads its inputs would read what it wrote (a kernel on the GPU, a torch op refusing memory
// that aliases its input), so the backend makes that output in memory of its own and Write
// copies it in once the execution is done. `regions` must outlive the requests.
OutputBufferSource PlacedOutputBuffers(const SharedMemoryRegions* regions,
                                       std::shared_ptr<const std::vector<TensorPlacement>> placed,
                                       const std::vector<Tensor>& inputs);

// What a front end encodes of `outputs`: `outputs` itself, or, when some output not placed in
// a region is on a GPU, a copy in `*storage` with those brought to the host (they are encoded
// from host memory; a placed one is written into its region from where it is). The error names
// the output (runtime/tensor_memory.h).
Result<const std::vector<Tensor>*> OutputsToEncode(const std::vector<Tensor>& outputs,
                                                   const std::vector<TensorPlacement>* placed,
                                                   std::vector<Tensor>* storage);

}  // namespace vramd::shared_memory
