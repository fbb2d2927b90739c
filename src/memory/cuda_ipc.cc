#include "memory/cuda_ipc.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstring>

#if VRAMD_WITH_CUDA
#include <cuda_runtime_api.h>

#include "memory/scoped_device.h"
#endif

namespace vramd::memory {

#if VRAMD_WITH_CUDA

namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == kIpcHandleBytes);

// cuMemGetAddressRange, from the driver through the runtime (vramd links no libcuda):
// cudaIpcGetMemHandle wants the start of the allocation, and a pool hands out pointers into
// its segments.
using GetAddressRange = int (*)(unsigned long long* base, size_t* size, unsigned long long ptr);

Result<GetAddressRange> AddressRangeFunction() {
  static const auto found = []() -> Result<GetAddressRange> {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult query{};
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000,
                                                             cudaEnableDefault, &query);
    if (err != cudaSuccess || fn == nullptr || query != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return Status::Unavailable(fmt::format(
          "the CUDA driver has no cuMemGetAddressRange ({})", cudaGetErrorString(err)));
    }
    return reinterpret_cast<GetAddressRange>(fn);
  }();
  return found;
}

Status CudaError(const char* what, int ordinal, cudaError_t err) {
  cudaGetLastError();
  return Status::Internal(fmt::format("cuda:{}: {} failed: {}", ordinal, what, cudaGetErrorString(err)));
}

}  // namespace

Result<IpcExport> ExportDeviceMemory(int ordinal, const void* ptr) {
  VRAMD_ASSIGN_OR_RETURN(GetAddressRange range, AddressRangeFunction());
  ScopedDevice scoped(ordinal);
  if (scoped.status() != cudaSuccess) return CudaError("cudaSetDevice", ordinal, scoped.status());
  // The driver call below needs the device's context current on this thread, which the runtime
  // makes so only at a thread's first runtime call: a thread that never made one (an instance
  // thread of a model whose framework did its CUDA work elsewhere) has none. This call makes it.
  cudaPointerAttributes attributes{};
  if (const cudaError_t err = cudaPointerGetAttributes(&attributes, ptr); err != cudaSuccess) {
    return CudaError("cudaPointerGetAttributes", ordinal, err);
  }
  if (attributes.type != cudaMemoryTypeDevice) {
    return Status::InvalidArgument(fmt::format("cuda:{}: {} is not device memory", ordinal, ptr));
  }
  unsigned long long base = 0;
  size_t size = 0;
  const auto address = reinterpret_cast<unsigned long long>(ptr);
  if (range(&base, &size, address) != 0 || base == 0 || address < base || address >= base + size) {
    return Status::InvalidArgument(
        fmt::format("cuda:{}: {} is not in a device allocation CUDA knows", ordinal, ptr));
  }
  cudaIpcMemHandle_t handle;
  const cudaError_t err = cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base));
  if (err != cudaSuccess) return CudaError("cudaIpcGetMemHandle", ordinal, err);
  IpcExport out;
  std::memcpy(out.handle.data(), &handle, kIpcHandleBytes);
  out.offset = address - base;
  return out;
}

Result<std::unique_ptr<ImportedMemory>> ImportedMemory::Open(int ordinal, const IpcHandle& handle) {
  ScopedDevice scoped(ordinal);
  if (scoped.status() != cudaSuccess) return CudaError("cudaSetDevice", ordinal, scoped.status());
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), kIpcHandleBytes);
  void* base = nullptr;
  const cudaError_t err = cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess) return CudaError("cudaIpcOpenMemHandle", ordinal, err);
  size_t size = 0;
  if (auto range = AddressRangeFunction(); range.ok()) {
    unsigned long long start = 0;
    if ((*range)(&start, &size, reinterpret_cast<uintptr_t>(base)) != 0) size = 0;
  }
  return std::unique_ptr<ImportedMemory>(
      new ImportedMemory(ordinal, static_cast<std::byte*>(base), size));
}

ImportedMemory::~ImportedMemory() {
  ScopedDevice scoped(ordinal_);
  const cudaError_t err = cudaIpcCloseMemHandle(base_);
  if (err != cudaSuccess) {
    cudaGetLastError();
    spdlog::error("cuda:{}: cudaIpcCloseMemHandle of {} failed: {}", ordinal_,
                  static_cast<void*>(base_), cudaGetErrorString(err));
  }
}

#else  // !VRAMD_WITH_CUDA

Result<IpcExport> ExportDeviceMemory(int ordinal, const void*) {
  return Status::Unavailable(fmt::format("cuda:{}: no CUDA IPC: built without CUDA", ordinal));
}

Result<std::unique_ptr<ImportedMemory>> ImportedMemory::Open(int ordinal, const IpcHandle&) {
  return Status::Unavailable(fmt::format("cuda:{}: no CUDA IPC: built without CUDA", ordinal));
}

ImportedMemory::~ImportedMemory() = default;

#endif

}  // namespace vramd::memory
