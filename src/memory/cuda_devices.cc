#include "memory/cuda_devices.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <utility>

#include "core/mutex.h"

#if VRAMD_WITH_CUDA
#include <cuda_runtime_api.h>

#include "memory/scoped_device.h"
#endif

namespace vramd::memory {
namespace {

std::atomic<uint64_t> copied_h2d{0};
std::atomic<uint64_t> copied_d2h{0};
std::atomic<uint64_t> copied_d2d{0};

void CountCopy(Device dst, Device src, size_t size) {
  if (dst.is_cuda() && src.is_cuda()) {
    copied_d2d.fetch_add(size, std::memory_order_relaxed);
  } else if (dst.is_cuda()) {
    copied_h2d.fetch_add(size, std::memory_order_relaxed);
  } else if (src.is_cuda()) {
    copied_d2h.fetch_add(size, std::memory_order_relaxed);
  }
}

}  // namespace

const char* GpuRouteName(GpuRoute route) {
  switch (route) {
    case GpuRoute::kSame:
      return "same GPU";
    case GpuRoute::kPeer:
      return "peer to peer";
    case GpuRoute::kStaged:
      return "staged through host memory";
  }
  return "unknown";
}

CopiedBytes CopiedBytesTotal() {
  return {copied_h2d.load(std::memory_order_relaxed), copied_d2h.load(std::memory_order_relaxed),
          copied_d2d.load(std::memory_order_relaxed)};
}

#if VRAMD_WITH_CUDA

int CudaDeviceCount() {
  int count = 0;
  // cudaGetDeviceCount fails without a driver or GPU; that means "no devices", not an error.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

std::string CudaDescription() {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return fmt::format("CUDA runtime {}.{}: no usable device ({})", runtime / 1000,
                       (runtime % 1000) / 10, cudaGetErrorString(err));
  }
  std::string s = fmt::format("CUDA runtime {}.{}: {} device(s)", runtime / 1000,
                              (runtime % 1000) / 10, count);
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) {
      s += fmt::format("; cuda:{} {} ({} MiB)", i, prop.name, prop.totalGlobalMem >> 20);
    }
  }
  return s;
}

Result<std::string> CudaPciBusId(int ordinal) {
  char bus_id[32] = {};
  cudaError_t err = cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), ordinal);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status::Unavailable(
        fmt::format("cuda:{}: no PCI bus id ({})", ordinal, cudaGetErrorString(err)));
  }
  return std::string(bus_id);
}

Status CudaDeviceUsable(int ordinal) {
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    cudaGetLastError();
    return Status::Unavailable(fmt::format("cuda:{} is not available: no usable CUDA device ({})",
                                           ordinal, cudaGetErrorString(err)));
  }
  if (ordinal < 0 || ordinal >= count) {
    return Status::Unavailable(
        fmt::format("cuda:{} does not exist: this process sees {} CUDA device(s)", ordinal, count));
  }
  return Status::Ok();
}

int CudaCurrentDevice() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return device;
}

Status CudaInitContext(int ordinal) {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) {
    cudaGetLastError();
    previous = -1;
  }
  cudaError_t err = cudaSetDevice(ordinal);
  if (err == cudaSuccess) err = cudaFree(nullptr);  // forces the primary context into being
  if (previous >= 0 && previous != ordinal) cudaSetDevice(previous);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status::Unavailable(
        fmt::format("cuda:{}: cannot create a CUDA context ({})", ordinal, cudaGetErrorString(err)));
  }
  return Status::Ok();
}

namespace {

// Each pair's route, asked once: enabling peer access maps one GPU's allocations into the
// other's address space, which is done once per pair and cannot be asked again cheaply.
Mutex routes_mu;
std::map<std::pair<int, int>, GpuRoute>& Routes() REQUIRES(routes_mu) {
  static std::map<std::pair<int, int>, GpuRoute> routes;
  return routes;
}

}  // namespace

Result<GpuRoute> GpuToGpuRoute(int dst, int src) {
  MutexLock lock(routes_mu);
  auto& routes = Routes();
  // A pair asked before was checked then: every copy between two GPUs asks.
  if (auto it = routes.find({dst, src}); it != routes.end()) return it->second;
  const int count = CudaDeviceCount();
  if (dst < 0 || dst >= count || src < 0 || src >= count) {
    return Status::Unavailable(fmt::format("no route from cuda:{} to cuda:{}: this process sees {} "
                                           "GPU(s)", src, dst, count));
  }
  if (dst == src) return GpuRoute::kSame;
  int can = 0;
  cudaError_t err = cudaDeviceCanAccessPeer(&can, dst, src);
  std::string why;
  if (err != cudaSuccess) {
    why = cudaGetErrorString(err);
  } else if (can == 0) {
    why = "the GPUs cannot reach each other's memory";
  } else {
    ScopedDevice scoped(dst);
    err = scoped.status();
    if (err == cudaSuccess) err = cudaDeviceEnablePeerAccess(src, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) err = cudaSuccess;
    if (err != cudaSuccess) why = cudaGetErrorString(err);
  }
  cudaGetLastError();  // an error above is answered by staging, not left for the next call
  const GpuRoute route = why.empty() ? GpuRoute::kPeer : GpuRoute::kStaged;
  if (route == GpuRoute::kPeer) {
    spdlog::info("cuda:{} reads cuda:{}'s memory directly: copies between them go peer to peer",
                 dst, src);
  } else {
    spdlog::info("no peer access from cuda:{} to cuda:{} ({}): copies between them are staged "
                 "through pinned host memory",
                 dst, src, why);
  }
  routes.emplace(std::make_pair(dst, src), route);
  return route;
}

namespace {

// More pieces than this (ranges closer than a sixteenth of their size) and an overlapping copy
// within a GPU goes through host memory instead: rare (a client's placement a few bytes off its
// input), and a copy per few bytes would cost more than the round trip.
constexpr size_t kMaxOverlapPieces = 16;

// Counts what it moved (CountCopy): within the GPU, or out to host and back.
cudaError_t QueueCopyWithinGpu(Device gpu, void* dst, const void* src, size_t size,
                               cudaStream_t stream) {
  const auto pieces = OverlapSafePieces(reinterpret_cast<uintptr_t>(dst),
                                        reinterpret_cast<uintptr_t>(src), size, kMaxOverlapPieces);
  if (!pieces) {
    // Each copy is waited for, so `staged` may go at the end of this scope.
    std::vector<std::byte> staged(size);
    cudaError_t err = cudaMemcpyAsync(staged.data(), src, size, cudaMemcpyDefault, stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
    if (err == cudaSuccess) {
      err = cudaMemcpyAsync(dst, staged.data(), size, cudaMemcpyDefault, stream);
    }
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
    if (err == cudaSuccess) {
      CountCopy(Device::Cpu(), gpu, size);
      CountCopy(gpu, Device::Cpu(), size);
    }
    return err;
  }
  for (const CopyPiece& p : *pieces) {
    cudaError_t err = cudaMemcpyAsync(static_cast<std::byte*>(dst) + p.offset,
                                      static_cast<const std::byte*>(src) + p.offset, p.size,
                                      cudaMemcpyDefault, stream);
    if (err != cudaSuccess) return err;
  }
  CountCopy(gpu, gpu, size);
  return cudaSuccess;
}

}  // namespace

Status QueueCopy(Device dst_device, void* dst, Device src_device, const void* src, size_t size,
                 void* stream) {
  if (size == 0) return Status::Ok();
  if (!dst_device.is_cuda() && !src_device.is_cuda()) {
    std::memmove(dst, src, size);  // the ranges may overlap (cuda_devices.h)
    return Status::Ok();
  }
  if (dst_device.is_cuda() && src_device.is_cuda() && dst_device.index == src_device.index) {
    if (cudaError_t err =
            QueueCopyWithinGpu(dst_device, dst, src, size, static_cast<cudaStream_t>(stream));
        err != cudaSuccess) {
      cudaGetLastError();
      return Status::Internal(fmt::format("copying {} bytes within {}: {}", size,
                                          dst_device.ToString(), cudaGetErrorString(err)));
    }
    return Status::Ok();
  }
  // Between two GPUs the copy below goes peer to peer once access is enabled, else the driver
  // stages it: the route decides, once per pair.
  if (dst_device.is_cuda() && src_device.is_cuda() && dst_device.index != src_device.index) {
    VRAMD_RETURN_IF_ERROR(GpuToGpuRoute(dst_device.index, src_device.index).status());
  }
  // cudaMemcpyDefault infers the direction from the pointers (unified addressing, which every
  // GPU vramd supports has), so a pinned or pageable host pointer needs no special case.
  cudaError_t err =
      cudaMemcpyAsync(dst, src, size, cudaMemcpyDefault, static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status::Internal(fmt::format("copying {} bytes from {} to {}: {}", size,
                                        src_device.ToString(), dst_device.ToString(),
                                        cudaGetErrorString(err)));
  }
  CountCopy(dst_device, src_device, size);
  return Status::Ok();
}

Status CopyBytes(Device dst_device, void* dst, Device src_device, const void* src, size_t size,
                 void* stream) {
  VRAMD_RETURN_IF_ERROR(QueueCopy(dst_device, dst, src_device, src, size, stream));
  if (size == 0 || (!dst_device.is_cuda() && !src_device.is_cuda())) return Status::Ok();
  if (cudaError_t err = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
      err != cudaSuccess) {
    cudaGetLastError();
    return Status::Internal(fmt::format("copying {} bytes from {} to {}: {}", size,
                                        src_device.ToString(), dst_device.ToString(),
                                        cudaGetErrorString(err)));
  }
  return Status::Ok();
}

Status SynchronizeDevice(int ordinal) {
  ScopedDevice scoped(ordinal);
  cudaError_t err = scoped.status();
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status::Internal(
        fmt::format("cuda:{}: cudaDeviceSynchronize failed: {}", ordinal, cudaGetErrorString(err)));
  }
  return Status::Ok();
}

Status SynchronizeStream(int ordinal, void* stream) {
  ScopedDevice scoped(ordinal);
  cudaError_t err = scoped.status();
  if (err == cudaSuccess) err = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status::Internal(
        fmt::format("cuda:{}: cudaStreamSynchronize failed: {}", ordinal, cudaGetErrorString(err)));
  }
  return Status::Ok();
}

#else

int CudaDeviceCount() { return 0; }
std::string CudaDescription() { return "built without CUDA: CPU only"; }
Result<std::string> CudaPciBusId(int ordinal) {
  return Status::Unavailable("built without CUDA");
}
Status CudaInitContext(int ordinal) { return Status::Unavailable("built without CUDA"); }
int CudaCurrentDevice() { return 0; }
Result<GpuRoute> GpuToGpuRoute(int dst, int src) {
  return Status::Unavailable(
      fmt::format("no route from cuda:{} to cuda:{}: built without CUDA", src, dst));
}
Status CudaDeviceUsable(int ordinal) {
  return Status::Unavailable(fmt::format("cuda:{} is not available: built without CUDA", ordinal));
}
Status SynchronizeDevice(int ordinal) { return Status::Unavailable("built without CUDA"); }
Status SynchronizeStream(int ordinal, void* stream) {
  return Status::Unavailable("built without CUDA");
}

Status QueueCopy(Device dst_device, void* dst, Device src_device, const void* src, size_t size,
                 void* stream) {
  return CopyBytes(dst_device, dst, src_device, src, size, stream);
}

Status CopyBytes(Device dst_device, void* dst, Device src_device, const void* src, size_t size,
                 void* stream) {
  if (size == 0) return Status::Ok();
  if (dst_device.is_cuda() || src_device.is_cuda()) {
    return Status::Unavailable(fmt::format("copying to or from {}: built without CUDA",
                                           dst_device.is_cuda() ? dst_device.ToString()
                                                                : src_device.ToString()));
  }
  std::memmove(dst, src, size);  // the ranges may overlap (cuda_devices.h)
  return Status::Ok();
}

#endif

std::optional<std::vector<CopyPiece>> OverlapSafePieces(uintptr_t dst, uintptr_t src,
                                                        size_t size, size_t max_pieces) {
  std::vector<CopyPiece> pieces;
  if (size == 0 || dst == src) return pieces;
  const uintptr_t apart = dst > src ? dst - src : src - dst;
  if (apart >= size) {
    pieces.push_back({0, size});
    return pieces;
  }
  // Pieces `apart` long: each writes only bytes an earlier piece has read. Moving down, that is
  // front to back; moving up, back to front.
  const size_t count = (size + apart - 1) / apart;
  if (count > max_pieces) return std::nullopt;
  pieces.reserve(count);
  for (size_t offset = 0; offset < size; offset += apart) {
    pieces.push_back({offset, std::min<size_t>(apart, size - offset)});
  }
  if (dst > src) std::reverse(pieces.begin(), pieces.end());
  return pieces;
}

}  // namespace vramd::memory
