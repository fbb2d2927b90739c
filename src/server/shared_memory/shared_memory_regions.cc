#include "server/shared_memory/shared_memory_regions.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cerrno>
#include <cstring>
#include <utility>

#include "memory/cuda_devices.h"
#include "runtime/tensor_memory.h"

namespace vramd::shared_memory {

// What a registered region keeps open (an mmap of the object from its start to the region's
// end, as mmap offsets must be page-aligned and the region's offset need not be; or the CUDA
// import) and its charge in the ledger, for as long as the region is registered or used.
struct SharedMemoryRegions::Opened {
  Opened() = default;
  ~Opened() {
    if (ledger != nullptr) {
      ledger->RecordFree(this);
      ledger->CloseOwner(owner);
    }
    if (mapped != nullptr) ::munmap(mapped, mapped_size);
  }
  Opened(const Opened&) = delete;
  Opened& operator=(const Opened&) = delete;
  void* mapped = nullptr;
  size_t mapped_size = 0;
  std::unique_ptr<memory::ImportedMemory> imported;
  // The charge's key is this object's address: no allocation can have it, and two regions
  // over one CUDA allocation (CUDA maps a handle once per process) still get a key each.
  memory::Ledger* ledger = nullptr;
  memory::OwnerId owner = memory::kNoOwner;
};

const TensorPlacement* PlacementOf(const std::vector<TensorPlacement>* placed,
                                   std::string_view name) {
  if (placed == nullptr) return nullptr;
  for (const TensorPlacement& p : *placed) {
    if (p.tensor == name) return &p;
  }
  return nullptr;
}

Status AttachInput(const SharedMemoryRegions& regions, const TensorPlacement& placement,
                   Tensor* tensor) {
  VRAMD_ASSIGN_OR_RETURN(auto slice, regions.Find(placement.region, placement.offset,
                                                  placement.byte_size,
                                                  fmt::format("input '{}'", tensor->name)));
  if (tensor->datatype != DataType::kBytes) {
    if (const std::optional<uint64_t> needed = FixedByteSize(*tensor);
        needed != placement.byte_size) {
      return Status::InvalidArgument(fmt::format(
          "input '{}': shared_memory_byte_size is {} bytes but shape {} of {} needs {}",
          tensor->name, placement.byte_size, ShapeToString(tensor->shape),
          DataTypeWireName(tensor->datatype),
          needed ? fmt::format("{}", *needed) : std::string("more than 2^64")));
    }
  }
  tensor->data = SharedBuffer::View(std::move(slice.holder), slice.data, slice.size);
  tensor->gpu = slice.gpu;
  if (tensor->datatype != DataType::kBytes) return Status::Ok();
  VRAMD_RETURN_IF_ERROR(runtime::MoveToHost(tensor));
  return SplitBytesElements(tensor->data.view(), tensor->name, ElementCount(tensor->shape))
      .status();
}

OutputBufferSource PlacedOutputBuffers(const SharedMemoryRegions* regions,
                                       std::shared_ptr<const std::vector<TensorPlacement>> placed,
                                       const std::vector<Tensor>& inputs) {
  // Where the inputs' bytes are: only compared with, never read through.
  struct Range {
    uintptr_t begin;
    uintptr_t end;
    int gpu;
  };
  std::vector<Range> read;
  for (const Tensor& t : inputs) {
    const auto begin = reinterpret_cast<uintptr_t>(t.data.data());
    if (t.data.size() > 0) read.push_back({begin, begin + t.data.size(), t.gpu});
  }
  return [regions, placed = std::move(placed), read = std::move(read)](
             std::string_view name, size_t byte_size) -> std::optional<OutputBuffer> {
    const TensorPlacement* p = PlacementOf(placed.get(), name);
    if (p == nullptr || byte_size > p->byte_size) return std::nullopt;
    auto slice = regions->Find(p->region, p->offset, byte_size, "output");
    if (!slice.ok()) return std::nullopt;  // unregistered meanwhile: Write will say so
    const auto begin = reinterpret_cast<uintptr_t>(slice->data);
    for (const Range& r : read) {
      if (r.gpu == slice->gpu && begin < r.end && r.begin < begin + byte_size) return std::nullopt;
    }
    return OutputBuffer{SharedBuffer::View(std::move(slice->holder), slice->data, byte_size),
                        slice->gpu};
  };
}

Result<const std::vector<Tensor>*> OutputsToEncode(const std::vector<Tensor>& outputs,
                                                   const std::vector<TensorPlacement>* placed,
                                                   std::vector<Tensor>* storage) {
  auto moves = [placed](const Tensor& t) {
    return t.on_gpu() && PlacementOf(placed, t.name) == nullptr;
  };
  if (std::none_of(outputs.begin(), outputs.end(), moves)) return &outputs;
  *storage = outputs;
  for (Tensor& t : *storage) {
    if (moves(t)) VRAMD_RETURN_IF_ERROR(runtime::MoveToHost(&t));
  }
  return storage;
}

Result<memory::IpcHandle> ToIpcHandle(std::string_view raw, std::string_view what) {
  memory::IpcHandle handle{};
  if (raw.size() != handle.size()) {
    return Status::InvalidArgument(fmt::format(
        "{}: a CUDA IPC handle has {} bytes, got {}", what, handle.size(), raw.size()));
  }
  std::memcpy(handle.data(), raw.data(), raw.size());
  return handle;
}

std::string_view RegionKindName(RegionKind kind) {
  return kind == RegionKind::kCuda ? "CUDA" : "system";
}

namespace {

Status CheckKey(const std::string& key) {
  if (key.size() < 2 || key[0] != '/' || key.find('/', 1) != std::string::npos) {
    return Status::InvalidArgument(fmt::format(
        "shared memory key '{}' must be '/' and a name with no other '/'", key));
  }
  return Status::Ok();
}

Status CheckName(const std::string& name, uint64_t byte_size) {
  if (name.empty()) return Status::InvalidArgument("a shared memory region needs a name");
  if (byte_size == 0) {
    return Status::InvalidArgument(fmt::format("shared memory region '{}' has byte_size 0", name));
  }
  return Status::Ok();
}

}  // namespace

Status SharedMemoryRegions::RegisterSystem(const std::string& name, const std::string& key,
                                           uint64_t offset, uint64_t byte_size) {
  VRAMD_RETURN_IF_ERROR(CheckName(name, byte_size));
  VRAMD_RETURN_IF_ERROR(CheckKey(key));
  uint64_t end = 0;
  if (__builtin_add_overflow(offset, byte_size, &end)) {
    return Status::InvalidArgument(
        fmt::format("shared memory region '{}': offset {} + byte_size {} overflows", name, offset,
                    byte_size));
  }
  {
    MutexLock lock(mu_);
    if (regions_.count(name) > 0) {
      return Status::AlreadyExists(
          fmt::format("shared memory region '{}' is already registered", name));
    }
  }
  const int fd = ::shm_open(key.c_str(), O_RDWR, 0);
  if (fd < 0) {
    const int err = errno;
    const std::string why = std::strerror(err);
    return err == ENOENT ? Status::NotFound(fmt::format(
                               "shared memory key '{}' (region '{}'): no such object", key, name))
                         : Status::InvalidArgument(fmt::format(
                               "shared memory key '{}' (region '{}'): {}", key, name, why));
  }
  struct stat st {};
  const bool stated = ::fstat(fd, &st) == 0;
  if (!stated || static_cast<uint64_t>(st.st_size) < end) {
    ::close(fd);
    return Status::InvalidArgument(fmt::format(
        "shared memory region '{}': offset {} + byte_size {} is beyond the {} bytes of '{}'", name,
        offset, byte_size, stated ? static_cast<uint64_t>(st.st_size) : 0, key));
  }
  void* base = ::mmap(nullptr, end, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the object
  if (base == MAP_FAILED) {
    return Status::Internal(fmt::format("shared memory region '{}': mapping '{}' failed: {}", name,
                                        key, std::strerror(err)));
  }
  Entry entry;
  entry.region = Region{name, RegionKind::kSystem, key, offset, byte_size, kOnHost};
  entry.opened = std::make_shared<Opened>();
  entry.opened->mapped = base;
  entry.opened->mapped_size = end;
  entry.base = static_cast<std::byte*>(base) + offset;
  Charge(entry.region, entry.opened.get());
  return Insert(std::move(entry));
}

Status SharedMemoryRegions::RegisterCuda(const std::string& name, const memory::IpcHandle& handle,
                                         int device_id, uint64_t byte_size) {
  VRAMD_RETURN_IF_ERROR(CheckName(name, byte_size));
  const int devices = memory::CudaDeviceCount();
  if (device_id < 0 || device_id >= devices) {
    return Status::InvalidArgument(fmt::format(
        "CUDA shared memory region '{}': device {} is not one this server uses ({})", name,
        device_id,
        devices == 0 ? std::string("it has no CUDA device")
                     : fmt::format("devices 0 to {}", devices - 1)));
  }
  {
    MutexLock lock(mu_);
    if (regions_.count(name) > 0) {
      return Status::AlreadyExists(
          fmt::format("shared memory region '{}' is already registered", name));
    }
  }
  if (contexts_ != nullptr) {
    if (Status s = contexts_->Open(device_id); !s.ok()) {
      return Status::Unavailable(fmt::format("CUDA shared memory region '{}': {}", name,
                                             s.message()));
    }
  }
  auto imported = memory::ImportedMemory::Open(device_id, handle);
  if (!imported.ok()) {
    return Status::InvalidArgument(fmt::format(
        "CUDA shared memory region '{}': cannot open its handle on device {}: {}", name,
        device_id, imported.status().message()));
  }
  const size_t allocated = (*imported)->size();
  if (allocated != 0 && byte_size > allocated) {
    return Status::InvalidArgument(fmt::format(
        "CUDA shared memory region '{}': byte_size {} is beyond the {} bytes of its allocation",
        name, byte_size, allocated));
  }
  Entry entry;
  entry.region = Region{name, RegionKind::kCuda, "", 0, byte_size, device_id};
  entry.opened = std::make_shared<Opened>();
  entry.base = (*imported)->base();
  entry.opened->imported = std::move(imported).value();
  Charge(entry.region, entry.opened.get());
  return Insert(std::move(entry));
}

void SharedMemoryRegions::Charge(const Region& region, Opened* opened) const {
  if (ledger_ == nullptr) return;
  const bool cuda = region.kind == RegionKind::kCuda;
  opened->ledger = ledger_;
  opened->owner = ledger_->OpenOwner(memory::kNoOwner, memory::OwnerKind::kScope,
                                     (cuda ? "client-cudashm:" : "client-shm:") + region.name);
  ledger_->RecordAllocation(opened, region.byte_size,
                            cuda ? memory::Device::Cuda(region.device_id) : memory::Device::Cpu(),
                            opened->owner);
}

Status SharedMemoryRegions::Insert(Entry entry) {
  MutexLock lock(mu_);
  const std::string name = entry.region.name;
  auto [it, inserted] = regions_.emplace(name, std::move(entry));
  if (!inserted) {
    return Status::AlreadyExists(fmt::format("shared memory region '{}' is already registered", name));
  }
  return Status::Ok();
}

Status SharedMemoryRegions::Unregister(RegionKind kind, const std::string& name) {
  std::vector<Entry> gone;  // closed (if unused) after the lock is let go
  MutexLock lock(mu_);
  for (auto it = regions_.begin(); it != regions_.end();) {
    if (it->second.region.kind == kind && (name.empty() || it->first == name)) {
      gone.push_back(std::move(it->second));
      it = regions_.erase(it);
    } else {
      ++it;
    }
  }
  return Status::Ok();
}

Result<std::vector<SharedMemoryRegions::Region>> SharedMemoryRegions::List(
    RegionKind kind, const std::string& name) const {
  MutexLock lock(mu_);
  std::vector<Region> out;
  for (const auto& [n, e] : regions_) {
    if (e.region.kind == kind && (name.empty() || n == name)) out.push_back(e.region);
  }
  if (!name.empty() && out.empty()) {
    return Status::NotFound(fmt::format("no {} shared memory region named '{}' is registered",
                                        RegionKindName(kind), name));
  }
  return out;
}

Result<SharedMemoryRegions::Slice> SharedMemoryRegions::Find(const std::string& name,
                                                             uint64_t offset, uint64_t size,
                                                             const std::string& what) const {
  MutexLock lock(mu_);
  auto it = regions_.find(name);
  if (it == regions_.end()) {
    return Status::NotFound(fmt::format(
        "{}: no shared memory region named '{}' is registered", what, name));
  }
  const Region& r = it->second.region;
  uint64_t end = 0;
  if (__builtin_add_overflow(offset, size, &end) || end > r.byte_size) {
    return Status::InvalidArgument(fmt::format(
        "{}: {} bytes at offset {} are beyond {} shared memory region '{}' ({} bytes)", what,
        size, offset, RegionKindName(r.kind), name, r.byte_size));
  }
  Slice slice;
  slice.holder = it->second.opened;
  slice.data = it->second.base + offset;
  slice.size = static_cast<size_t>(size);
  slice.gpu = r.kind == RegionKind::kCuda ? r.device_id : kOnHost;
  return slice;
}

bool SharedMemoryRegions::IsCuda(const std::string& name) const {
  MutexLock lock(mu_);
  auto it = regions_.find(name);
  return it != regions_.end() && it->second.region.kind == RegionKind::kCuda;
}

Status SharedMemoryRegions::Write(const TensorPlacement& placement, const Tensor& output,
                                  const std::string& what) const {
  VRAMD_ASSIGN_OR_RETURN(Slice slice, Find(placement.region, placement.offset,
                                           placement.byte_size, what));
  const size_t bytes = output.data.size();
  if (bytes > slice.size) {
    return Status::InvalidArgument(fmt::format(
        "{} has {} bytes, more than the {} of its shared memory", what, bytes, slice.size));
  }
  if (bytes == 0) return Status::Ok();
  if (output.data.data() == slice.data && output.gpu == slice.gpu) return Status::Ok();
  // The output may be a view of an input in this same region (a model that answers with the
  // tensor it was given) placed over part of that input's bytes: CopyBytes copies overlapping
  // ranges as memmove does, on the host and within a GPU.
  Status copied = memory::CopyBytes(memory::Device::OfTensorGpu(slice.gpu), slice.data,
                                    memory::Device::OfTensorGpu(output.gpu), output.data.data(),
                                    bytes, /*stream=*/nullptr);
  if (!copied.ok()) return copied.WithContext(what);
  return Status::Ok();
}

uint64_t SharedMemoryRegions::RegisteredBytes(RegionKind kind) const {
  MutexLock lock(mu_);
  uint64_t total = 0;
  for (const auto& [n, e] : regions_) {
    if (e.region.kind == kind) total += e.region.byte_size;
  }
  return total;
}

}  // namespace vramd::shared_memory
