// The CUDA VMM SegmentSource (segment_source.h): a segment is one address range from
// cuMemAddressReserve, backed unit by unit (VmmDecommitUnit: the granularity, or larger in large
// segments) by physical allocations of their own (cuMemCreate, cuMemMap), so that any unit can
// go back to the driver (cuMemUnmap, cuMemRelease) while the rest of the segment, and its
// addresses, stay.
//
// The driver's functions come through cudaGetDriverEntryPointByVersion: the binary links the
// static runtime only and must start on machines with no driver at all.
#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "memory/segment_source.h"

#if VRAMD_WITH_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include "core/mutex.h"
#include "memory/byte_size.h"
#include "memory/cuda_devices.h"
#include "memory/scoped_device.h"
#endif

namespace vramd::memory {

#if VRAMD_WITH_CUDA

namespace {

// The driver calls this source makes, resolved once per process.
struct VmmDriver {
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemAddressReserve_v10020 reserve = nullptr;
  PFN_cuMemAddressFree_v10020 address_free = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
  PFN_cuDeviceGetAttribute_v2000 attribute = nullptr;
  PFN_cuGetErrorString_v6000 error_string = nullptr;
  std::string missing;  // the first symbol not found; empty when all were

  std::string Describe(CUresult result) const {
    const char* text = nullptr;
    if (error_string != nullptr) error_string(result, &text);
    return fmt::format("{} ({})", text != nullptr ? text : "unknown error", static_cast<int>(result));
  }
};

template <typename Fn>
void Resolve(const char* symbol, unsigned int version, Fn* fn, std::string* missing) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &address, version, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess || address == nullptr) {
    cudaGetLastError();
    if (missing->empty()) *missing = symbol;
    return;
  }
  *fn = reinterpret_cast<Fn>(address);
}

const VmmDriver& Driver() {
  static const VmmDriver driver = [] {
    VmmDriver d;
    Resolve("cuMemCreate", 10020, &d.create, &d.missing);
    Resolve("cuMemRelease", 10020, &d.release, &d.missing);
    Resolve("cuMemAddressReserve", 10020, &d.reserve, &d.missing);
    Resolve("cuMemAddressFree", 10020, &d.address_free, &d.missing);
    Resolve("cuMemMap", 10020, &d.map, &d.missing);
    Resolve("cuMemUnmap", 10020, &d.unmap, &d.missing);
    Resolve("cuMemSetAccess", 10020, &d.set_access, &d.missing);
    Resolve("cuMemGetAllocationGranularity", 10020, &d.granularity, &d.missing);
    Resolve("cuDeviceGetAttribute", 2000, &d.attribute, &d.missing);
    Resolve("cuGetErrorString", 6000, &d.error_string, &d.missing);
    return d;
  }();
  return driver;
}

class CudaVmmSegmentSource final : public SegmentSource {
 public:
  CudaVmmSegmentSource(int ordinal, size_t granularity)
      : ordinal_(ordinal), granularity_(granularity), driver_(Driver()) {
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop_.location.id = ordinal;
    access_.location = prop_.location;
    access_.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }

  ~CudaVmmSegmentSource() override {
    MutexLock lock(mu_);
    ScopedDevice scoped(ordinal_);
    for (auto& [base, segment] : segments_) {
      UnmapLocked(base, segment, 0, segment.chunks.size());
      driver_.address_free(base, segment.bytes);
    }
  }

  Device device() const override { return Device::Cuda(ordinal_); }
  size_t decommit_granularity() const override { return granularity_; }
  size_t DecommitUnit(size_t segment_size) const override {
    return VmmDecommitUnit(segment_size, granularity_);
  }

  Result<void*> Allocate(size_t size) override {
    ScopedDevice scoped(ordinal_);
    if (scoped.status() != cudaSuccess) {
      return Status::Unavailable(fmt::format("cuda:{}: cannot make the device current: {}",
                                             ordinal_, cudaGetErrorString(scoped.status())));
    }
    const size_t bytes = (std::max<size_t>(size, 1) + granularity_ - 1) / granularity_ * granularity_;
    const size_t unit = DecommitUnit(bytes);
    const size_t chunks = (bytes + unit - 1) / unit;
    CUdeviceptr base = 0;
    if (CUresult r = driver_.reserve(&base, bytes, granularity_, 0, 0); r != CUDA_SUCCESS) {
      return Failure("cuMemAddressReserve", bytes, r);
    }
    Segment segment{bytes, unit, std::vector<CUmemGenericAllocationHandle>(chunks, 0)};
    MutexLock lock(mu_);
    if (Status s = MapLocked(base, &segment, 0, chunks); !s.ok()) {
      UnmapLocked(base, segment, 0, chunks);
      driver_.address_free(base, bytes);
      return s;
    }
    segments_.emplace(base, std::move(segment));
    return reinterpret_cast<void*>(base);
  }

  void Free(void* ptr, size_t /*size*/) override {
    ScopedDevice scoped(ordinal_);
    MutexLock lock(mu_);
    auto it = segments_.find(reinterpret_cast<CUdeviceptr>(ptr));
    if (it == segments_.end()) {
      spdlog::error("cuda:{}: VMM source: Free of unknown segment {}", ordinal_, ptr);
      return;
    }
    UnmapLocked(it->first, it->second, 0, it->second.chunks.size());
    if (CUresult r = driver_.address_free(it->first, it->second.bytes); r != CUDA_SUCCESS) {
      spdlog::error("cuda:{}: cuMemAddressFree at {} failed: {}", ordinal_, ptr,
                    driver_.Describe(r));
    }
    segments_.erase(it);
  }

  void Synchronize() override {
    ScopedDevice scoped(ordinal_);
    if (cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) {
      cudaGetLastError();
      spdlog::error("cuda:{}: cudaDeviceSynchronize failed: {}", ordinal_, cudaGetErrorString(err));
    }
  }

  void Decommit(void* ptr, size_t size) override {
    ScopedDevice scoped(ordinal_);
    MutexLock lock(mu_);
    auto [base, segment, first, last] = Locate(ptr, size);
    if (segment == nullptr) return;
    UnmapLocked(base, *segment, first, last);
  }

  Status Recommit(void* ptr, size_t size) override {
    ScopedDevice scoped(ordinal_);
    MutexLock lock(mu_);
    auto [base, segment, first, last] = Locate(ptr, size);
    if (segment == nullptr) {
      return Status::InvalidArgument(
          fmt::format("cuda:{}: VMM source: {} + {} bytes is not in one segment", ordinal_, ptr, size));
    }
    Status s = MapLocked(base, segment, first, last);
    if (!s.ok()) UnmapLocked(base, *segment, first, last);
    return s;
  }

 private:
  struct Segment {
    size_t bytes;  // a multiple of the granularity
    size_t unit;   // VmmDecommitUnit(bytes); the last chunk ends at `bytes`
    std::vector<CUmemGenericAllocationHandle> chunks;  // per unit; 0 while decommitted
    size_t ChunkSize(size_t i) const { return std::min(unit, bytes - i * unit); }
  };
  struct Located {
    CUdeviceptr base;
    Segment* segment;
    size_t first, last;  // chunks [first, last)
  };

  // The segment holding [ptr, ptr + size) as whole units; {nullptr} (logged) otherwise.
  Located Locate(void* ptr, size_t size) REQUIRES(mu_) {
    const CUdeviceptr address = reinterpret_cast<CUdeviceptr>(ptr);
    auto it = segments_.upper_bound(address);
    if (it != segments_.begin()) {
      --it;
      const Segment& s = it->second;
      const size_t offset = address - it->first, end = offset + size;
      if (address >= it->first && end <= s.bytes && offset % s.unit == 0 &&
          (end % s.unit == 0 || end == s.bytes)) {
        return {it->first, &it->second, offset / s.unit, (end + s.unit - 1) / s.unit};
      }
    }
    spdlog::error("cuda:{}: VMM source: range {} + {} bytes is not whole units of one segment",
                  ordinal_, ptr, size);
    return {0, nullptr, 0, 0};
  }

  // Backs chunks [first, last) that are not backed, then grants this device access to them.
  // On failure, what it mapped stays mapped (the caller unmaps the range).
  Status MapLocked(CUdeviceptr base, Segment* segment, size_t first, size_t last) REQUIRES(mu_) {
    const size_t begin = first * segment->unit;
    const size_t end = std::min(last * segment->unit, segment->bytes);
    for (size_t i = first; i < last; ++i) {
      if (segment->chunks[i] != 0) continue;
      const size_t size = segment->ChunkSize(i);
      CUmemGenericAllocationHandle handle = 0;
      if (CUresult r = driver_.create(&handle, size, &prop_, 0); r != CUDA_SUCCESS) {
        return Failure("cuMemCreate", end - begin, r);
      }
      if (CUresult r = driver_.map(base + i * segment->unit, size, 0, handle, 0);
          r != CUDA_SUCCESS) {
        driver_.release(handle);
        return Failure("cuMemMap", end - begin, r);
      }
      segment->chunks[i] = handle;
    }
    if (CUresult r = driver_.set_access(base + begin, end - begin, &access_, 1);
        r != CUDA_SUCCESS) {
      return Failure("cuMemSetAccess", end - begin, r);
    }
    return Status::Ok();
  }

  void UnmapLocked(CUdeviceptr base, Segment& segment, size_t first, size_t last) REQUIRES(mu_) {
    for (size_t i = first; i < last; ++i) {
      if (segment.chunks[i] == 0) continue;
      if (CUresult r = driver_.unmap(base + i * segment.unit, segment.ChunkSize(i));
          r != CUDA_SUCCESS) {
        spdlog::error("cuda:{}: cuMemUnmap failed: {}", ordinal_, driver_.Describe(r));
      }
      if (CUresult r = driver_.release(segment.chunks[i]); r != CUDA_SUCCESS) {
        spdlog::error("cuda:{}: cuMemRelease failed: {}", ordinal_, driver_.Describe(r));
      }
      segment.chunks[i] = 0;
    }
  }

  Status Failure(const char* call, size_t bytes, CUresult r) const {
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      return Status::ResourceExhausted(fmt::format("cuda:{}: out of memory: {} for {} failed",
                                                   ordinal_, call, FormatBytes(bytes)));
    }
    return Status::Internal(fmt::format("cuda:{}: {} for {} failed: {}", ordinal_, call,
                                        FormatBytes(bytes), driver_.Describe(r)));
  }

  const int ordinal_;
  const size_t granularity_;
  const VmmDriver& driver_;
  CUmemAllocationProp prop_{};
  CUmemAccessDesc access_{};
  Mutex mu_;
  std::map<CUdeviceptr, Segment> segments_ GUARDED_BY(mu_);
};

}  // namespace

Result<std::unique_ptr<SegmentSource>> MakeCudaVmmSegmentSource(int ordinal) {
  VRAMD_RETURN_IF_ERROR(CudaDeviceUsable(ordinal));
  VRAMD_RETURN_IF_ERROR(CudaInitContext(ordinal));  // the driver calls below need it
  const VmmDriver& driver = Driver();
  if (!driver.missing.empty()) {
    return Status::Unavailable(fmt::format(
        "cuda:{}: the VMM pool needs the driver's {}, which this driver does not offer", ordinal,
        driver.missing));
  }
  int supported = 0;
  driver.attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, ordinal);
  if (supported == 0) {
    return Status::Unavailable(fmt::format(
        "cuda:{} does not support CUDA virtual memory management: use the caching pool "
        "(--device-pool=caching)",
        ordinal));
  }
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = ordinal;
  size_t granularity = 0;
  if (CUresult r = driver.granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
      r != CUDA_SUCCESS || granularity == 0) {
    return Status::Unavailable(fmt::format("cuda:{}: cuMemGetAllocationGranularity failed: {}",
                                           ordinal, driver.Describe(r)));
  }
  return std::unique_ptr<SegmentSource>(
      std::make_unique<CudaVmmSegmentSource>(ordinal, granularity));
}

#else  // !VRAMD_WITH_CUDA

Result<std::unique_ptr<SegmentSource>> MakeCudaVmmSegmentSource(int ordinal) {
  return Status::Unavailable(fmt::format("cuda:{} is not available: built without CUDA", ordinal));
}

#endif

}  // namespace vramd::memory
