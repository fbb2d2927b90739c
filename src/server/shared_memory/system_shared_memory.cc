#include "server/shared_memory/system_shared_memory.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace vramd::shared_memory {

// One mmap of the object, from its start to the region's end (mmap offsets must be
// page-aligned; the region's offset need not be), and the region's charge in the ledger: both
// last as long as the region is registered or used.
struct SystemSharedMemory::Mapping {
  Mapping(void* b, size_t s) : base(static_cast<std::byte*>(b)), size(s) {}
  ~Mapping() {
    if (ledger != nullptr) {
      ledger->RecordFree(charged);
      ledger->CloseOwner(owner);
    }
    ::munmap(base, size);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  std::byte* const base;
  const size_t size;
  memory::Ledger* ledger = nullptr;
  memory::OwnerId owner = memory::kNoOwner;
  const void* charged = nullptr;
};

namespace {

Status CheckKey(const std::string& key) {
  if (key.size() < 2 || key[0] != '/' || key.find('/', 1) != std::string::npos) {
    return Status::InvalidArgument(fmt::format(
        "shared memory key '{}' must be '/' and a name with no other '/'", key));
  }
  return Status::Ok();
}

}  // namespace

Status SystemSharedMemory::Register(const std::string& name, const std::string& key,
                                    uint64_t offset, uint64_t byte_size) {
  if (name.empty()) return Status::InvalidArgument("a shared memory region needs a name");
  VRAMD_RETURN_IF_ERROR(CheckKey(key));
  if (byte_size == 0) {
    return Status::InvalidArgument(fmt::format("shared memory region '{}' has byte_size 0", name));
  }
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
  auto mapping = std::make_shared<Mapping>(base, end);
  if (ledger_ != nullptr) {
    mapping->ledger = ledger_;
    mapping->owner = ledger_->OpenOwner(memory::kNoOwner, memory::OwnerKind::kScope, "client-shm:" + name);
    mapping->charged = mapping->base + offset;
    ledger_->RecordAllocation(mapping->charged, byte_size, memory::Device::Cpu(), mapping->owner);
  }
  MutexLock lock(mu_);
  auto [it, inserted] = regions_.emplace(name, Entry{Region{name, key, offset, byte_size}, mapping});
  if (!inserted) {
    return Status::AlreadyExists(fmt::format("shared memory region '{}' is already registered", name));
  }
  return Status::Ok();
}

Status SystemSharedMemory::Unregister(const std::string& name) {
  std::map<std::string, Entry> gone;  // unmapped (if unused) after the lock is let go
  MutexLock lock(mu_);
  if (name.empty()) {
    gone.swap(regions_);
  } else if (auto it = regions_.find(name); it != regions_.end()) {
    gone.insert(regions_.extract(it));
  }
  return Status::Ok();
}

Result<std::vector<SystemSharedMemory::Region>> SystemSharedMemory::List(const std::string& name) const {
  MutexLock lock(mu_);
  std::vector<Region> out;
  if (name.empty()) {
    for (const auto& [n, e] : regions_) out.push_back(e.region);
    return out;
  }
  auto it = regions_.find(name);
  if (it == regions_.end()) {
    return Status::NotFound(fmt::format("no shared memory region named '{}' is registered", name));
  }
  out.push_back(it->second.region);
  return out;
}

Result<SystemSharedMemory::Slice> SystemSharedMemory::Find(const std::string& name,
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
        "{}: {} bytes at offset {} are beyond shared memory region '{}' ({} bytes)", what, size,
        offset, name, r.byte_size));
  }
  Slice slice;
  slice.holder = it->second.mapping;
  slice.data = it->second.mapping->base + r.offset + offset;
  slice.size = static_cast<size_t>(size);
  return slice;
}

Status SystemSharedMemory::Write(const TensorPlacement& placement, std::string_view bytes,
                                 const std::string& what) const {
  VRAMD_ASSIGN_OR_RETURN(Slice slice, Find(placement.region, placement.offset,
                                           placement.byte_size, what));
  if (bytes.size() > slice.size) {
    return Status::InvalidArgument(fmt::format(
        "{} has {} bytes, more than the {} of its shared memory", what, bytes.size(), slice.size));
  }
  if (!bytes.empty()) std::memcpy(slice.data, bytes.data(), bytes.size());
  return Status::Ok();
}

uint64_t SystemSharedMemory::RegisteredBytes() const {
  MutexLock lock(mu_);
  uint64_t total = 0;
  for (const auto& [n, e] : regions_) total += e.region.byte_size;
  return total;
}

}  // namespace vramd::shared_memory
