// SharedMemoryRegions: regions of a client's POSIX shared memory (each range checked, mapped
// while registered or used) and of its CUDA memory (refused here without a GPU; the round
// trip runs on the device: tests/device/cuda_shm_check.py).
#include "server/shared_memory/shared_memory_regions.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstring>
#include <string>

#include "memory/cuda_devices.h"

namespace vramd::shared_memory {
namespace {
using ::testing::HasSubstr;

// A shared-memory object of `size` bytes holding 0, 1, 2, ... (mod 256); unlinked at the end.
class Object {
 public:
  explicit Object(size_t size) : key_("/vramd_shm_test_" + std::to_string(::getpid())) {
    const int fd = ::shm_open(key_.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0);
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    for (size_t i = 0; i < size; ++i) static_cast<unsigned char*>(p)[i] = static_cast<unsigned char>(i);
    ::munmap(p, size);
    ::close(fd);
  }
  ~Object() { ::shm_unlink(key_.c_str()); }
  const std::string& key() const { return key_; }

 private:
  std::string key_;
};

TEST(SharedMemoryRegionsTest, ARegisteredRangeIsReadAndWrittenInPlace) {
  Object object(8192);
  SharedMemoryRegions shm;
  ASSERT_TRUE(shm.RegisterSystem("r", object.key(), 100, 1000).ok());
  auto slice = shm.Find("r", 10, 20, "input 'X'");
  ASSERT_TRUE(slice.ok()) << slice.status().ToString();
  EXPECT_EQ(slice->size, 20u);
  EXPECT_EQ(static_cast<unsigned char>(slice->data[0]), 110);  // object byte 100 + 10
  auto listed = shm.List(RegionKind::kSystem, "");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].key, object.key());
  EXPECT_EQ((*listed)[0].offset, 100u);
  EXPECT_EQ(shm.RegisteredBytes(RegionKind::kSystem), 1000u);

  // Unregistered while held: the slice stays mapped and writable until it goes.
  ASSERT_TRUE(shm.Unregister(RegionKind::kSystem, "r").ok());
  slice->data[0] = std::byte{7};
  EXPECT_EQ(slice->data[0], std::byte{7});
  EXPECT_FALSE(shm.Find("r", 0, 1, "input 'X'").ok());
  EXPECT_EQ(shm.List(RegionKind::kSystem, "r").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(shm.RegisteredBytes(RegionKind::kSystem), 0u);
}

TEST(SharedMemoryRegionsTest, EveryRangeAndKeyIsChecked) {
  Object object(4096);
  SharedMemoryRegions shm;
  for (const char* key : {"", "/", "noslash", "/a/b"}) {
    Status s = shm.RegisterSystem("r", key, 0, 16);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << key;
    EXPECT_THAT(s.message(), HasSubstr("no other '/'")) << key;
  }
  EXPECT_THAT(shm.RegisterSystem("r", object.key(), 4000, 200).message(),
              HasSubstr("beyond the 4096 bytes"));
  EXPECT_EQ(shm.RegisterSystem("r", "/vramd_no_such_object_ever", 0, 16).code(), StatusCode::kNotFound);
  EXPECT_EQ(shm.RegisterSystem("", object.key(), 0, 16).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(shm.RegisterSystem("r", object.key(), 0, 0).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(shm.RegisterSystem("r", object.key(), 0, 100).ok());
  EXPECT_EQ(shm.RegisterSystem("r", object.key(), 0, 100).code(), StatusCode::kAlreadyExists);
  auto over = shm.Find("r", 90, 11, "output 'Y'");
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(over.status().message(),
              HasSubstr("output 'Y': 11 bytes at offset 90 are beyond system shared memory region 'r' (100 bytes)"));
  EXPECT_FALSE(shm.Find("r", UINT64_MAX, 2, "x").ok());
  EXPECT_EQ(shm.Find("other", 0, 1, "x").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(shm.Unregister(RegionKind::kSystem, "").ok());
  EXPECT_TRUE(shm.Unregister(RegionKind::kSystem, "never").ok());
}

// With a ledger, a region is client-owned host memory while mapped: charged to an owner of its
// own until it is unregistered and no request holds it, then closed clean (no leak).
TEST(SharedMemoryRegionsTest, ARegionIsChargedInTheLedgerWhileMapped) {
  Object object(4096);
  memory::Ledger ledger;
  SharedMemoryRegions shm(&ledger);
  auto live = [&]() -> int64_t {
    for (const auto& o : ledger.Snapshot()) {
      if (o.name == "client-shm:r" && !o.closed) return o.self.live_bytes;
    }
    return -1;
  };
  ASSERT_TRUE(shm.RegisterSystem("r", object.key(), 96, 1000).ok());
  EXPECT_EQ(live(), 1000);
  auto slice = shm.Find("r", 0, 10, "input 'X'");
  ASSERT_TRUE(slice.ok());
  ASSERT_TRUE(shm.Unregister(RegionKind::kSystem, "r").ok());
  EXPECT_EQ(live(), 1000) << "still mapped for the request that holds it";
  *slice = SharedMemoryRegions::Slice();
  EXPECT_EQ(live(), -1);
  size_t leaks = 0;
  for (const auto& o : ledger.Snapshot()) leaks += o.self.live_count > 0 && o.name != "server";
  EXPECT_EQ(leaks, 0u);
}

// One namespace of names for both kinds, as in Triton; each kind's status and unregister see
// only its own regions.
TEST(SharedMemoryRegionsTest, KindsShareNamesButListAndUnregisterTheirOwn) {
  Object object(4096);
  SharedMemoryRegions shm;
  ASSERT_TRUE(shm.RegisterSystem("r", object.key(), 0, 100).ok());
  memory::IpcHandle handle{};
  EXPECT_EQ(shm.RegisterCuda("r", handle, 0, 100).code(),
            memory::CudaDeviceCount() > 0 ? StatusCode::kAlreadyExists
                                          : StatusCode::kInvalidArgument);
  EXPECT_EQ(shm.List(RegionKind::kCuda, "r").status().code(), StatusCode::kNotFound);
  auto all_cuda = shm.List(RegionKind::kCuda, "");
  ASSERT_TRUE(all_cuda.ok());
  EXPECT_TRUE(all_cuda->empty());
  ASSERT_TRUE(shm.Unregister(RegionKind::kCuda, "r").ok());
  EXPECT_TRUE(shm.List(RegionKind::kSystem, "r").ok()) << "a CUDA unregister left it alone";
  EXPECT_FALSE(shm.IsCuda("r"));
  ASSERT_TRUE(shm.Unregister(RegionKind::kCuda, "").ok());
  EXPECT_EQ(shm.RegisteredBytes(RegionKind::kSystem), 100u);
}

// A CUDA region names a device this server uses, a byte size, and a handle CUDA can open;
// anything else is refused with the reason (without a GPU, every device is refused).
TEST(SharedMemoryRegionsTest, ACudaRegionOnADeviceThisServerDoesNotUseIsRefused) {
  SharedMemoryRegions shm;
  memory::IpcHandle handle{};
  const int devices = memory::CudaDeviceCount();
  Status beyond = shm.RegisterCuda("c", handle, devices, 16);
  EXPECT_EQ(beyond.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(beyond.message(), HasSubstr(fmt::format("device {} is not one this server uses", devices)));
  EXPECT_EQ(shm.RegisterCuda("c", handle, -1, 16).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(shm.RegisterCuda("c", handle, 0, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(shm.RegisterCuda("", handle, 0, 16).code(), StatusCode::kInvalidArgument);
  if (devices > 0) {
    Status zeros = shm.RegisterCuda("c", handle, 0, 16);  // no allocation has an all-zero handle
    EXPECT_EQ(zeros.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(zeros.message(), HasSubstr("cannot open its handle on device 0"));
  }
  EXPECT_TRUE(shm.List(RegionKind::kCuda, "").value().empty());
}

TEST(SharedMemoryRegionsTest, AnIpcHandleHasExactlyItsSize) {
  EXPECT_TRUE(ToIpcHandle(std::string(memory::kIpcHandleBytes, 'x'), "h").ok());
  auto short_handle = ToIpcHandle("abc", "raw_handle");
  ASSERT_FALSE(short_handle.ok());
  EXPECT_THAT(short_handle.status().message(),
              HasSubstr("raw_handle: a CUDA IPC handle has 64 bytes, got 3"));
}

// An output placed in a system region is written there from host memory; one that does not fit
// the placement is refused naming it.
TEST(SharedMemoryRegionsTest, AnOutputIsWrittenIntoItsPlacement) {
  Object object(4096);
  SharedMemoryRegions shm;
  ASSERT_TRUE(shm.RegisterSystem("out", object.key(), 0, 64).ok());
  Tensor t{"Y", DataType::kUint8, {4}, SharedBuffer::FromString("\x09\x08\x07\x06")};
  ASSERT_TRUE(shm.Write({"Y", "out", 8, 4}, t, "output 'Y'").ok());
  auto slice = shm.Find("out", 8, 4, "check");
  ASSERT_TRUE(slice.ok());
  EXPECT_EQ(static_cast<int>(slice->data[0]), 9);
  EXPECT_EQ(static_cast<int>(slice->data[3]), 6);
  Status too_big = shm.Write({"Y", "out", 8, 2}, t, "output 'Y'");
  EXPECT_EQ(too_big.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(too_big.message(), HasSubstr("output 'Y' has 4 bytes, more than the 2"));
}

// A model may answer with its input itself (an identity that copies nothing, a python model
// returning the tensor it was given), and a client may place that output over the input's own
// bytes: the ranges overlap, and the write must still leave the input's bytes at the output's
// place (memcpy's result there is undefined, and AddressSanitizer stops the server on it).
TEST(SharedMemoryRegionsTest, AnOutputPlacedOverItsOwnInputIsWrittenWhole) {
  Object object(4096);
  SharedMemoryRegions shm;
  ASSERT_TRUE(shm.RegisterSystem("r", object.key(), 0, 2048).ok());
  constexpr size_t kBytes = 1000;
  auto input = shm.Find("r", 0, kBytes, "input 'X'");
  ASSERT_TRUE(input.ok());
  Tensor t{"X", DataType::kUint8, {kBytes}, SharedBuffer::View(input->holder, input->data, kBytes)};
  ASSERT_TRUE(shm.Write({"X", "r", 3, kBytes}, t, "output 'X'").ok());
  auto slice = shm.Find("r", 3, kBytes, "check");
  ASSERT_TRUE(slice.ok());
  for (size_t i = 0; i < kBytes; ++i) {
    ASSERT_EQ(static_cast<int>(slice->data[i]), static_cast<int>(i % 256)) << "byte " << i;
  }
}

// A placed output's memory is handed to the backend as its output buffer; written there, the
// front end's Write has nothing left to copy. An output larger than its placement, or one not
// placed, gets none.
TEST(SharedMemoryRegionsTest, APlacedOutputIsGivenItsRegionAndNeedsNoCopy) {
  Object object(4096);
  SharedMemoryRegions shm;
  ASSERT_TRUE(shm.RegisterSystem("out", object.key(), 0, 64).ok());
  auto placed = std::make_shared<std::vector<TensorPlacement>>(
      std::vector<TensorPlacement>{{"Y", "out", 8, 16}});
  OutputBufferSource source = PlacedOutputBuffers(&shm, placed, {});
  EXPECT_FALSE(source("Y", 17).has_value());
  EXPECT_FALSE(source("Z", 4).has_value());
  std::optional<OutputBuffer> given = source("Y", 4);
  ASSERT_TRUE(given.has_value());
  EXPECT_EQ(given->gpu, kOnHost);
  ASSERT_EQ(given->data.size(), 4u);
  std::memcpy(given->data.mutable_data(), "\x01\x02\x03\x04", 4);
  Tensor t{"Y", DataType::kUint8, {4}, given->data};
  ASSERT_TRUE(shm.Write((*placed)[0], t, "output 'Y'").ok());
  auto slice = shm.Find("out", 8, 4, "check");
  ASSERT_TRUE(slice.ok());
  EXPECT_EQ(slice->data, t.data.data()) << "the backend's output is the region itself";
  EXPECT_EQ(static_cast<int>(slice->data[3]), 4);
}

// An output placed over bytes an input is read from (in place, the same region) is not given
// to the backend, which would write it while still reading the input: it makes the output in
// memory of its own, and Write copies it in afterwards. One beside the input is given.
TEST(SharedMemoryRegionsTest, AnOutputOverlappingAnInputIsNotGivenToTheBackend) {
  Object object(4096);
  SharedMemoryRegions shm;
  ASSERT_TRUE(shm.RegisterSystem("r", object.key(), 0, 1024).ok());
  auto in = shm.Find("r", 100, 50, "input 'X'");
  ASSERT_TRUE(in.ok());
  std::vector<Tensor> inputs = {
      Tensor{"X", DataType::kUint8, {50}, SharedBuffer::View(in->holder, in->data, 50)},
      Tensor{"B", DataType::kUint8, {4}, SharedBuffer::CopyOf("abcd", 4)}};  // from the body
  auto placed = std::make_shared<std::vector<TensorPlacement>>(std::vector<TensorPlacement>{
      {"over", "r", 120, 50}, {"ends_at_input", "r", 60, 40}, {"touches_end", "r", 149, 10},
      {"after", "r", 150, 50}, {"before", "r", 0, 100}});
  OutputBufferSource source = PlacedOutputBuffers(&shm, placed, inputs);
  EXPECT_FALSE(source("over", 50).has_value());
  EXPECT_TRUE(source("ends_at_input", 40).has_value());  // [60, 100): ends where X begins
  EXPECT_FALSE(source("touches_end", 10).has_value());   // [149, 159): X's last byte
  EXPECT_TRUE(source("after", 50).has_value());          // [150, 200)
  EXPECT_TRUE(source("before", 100).has_value());        // [0, 100)
}

}  // namespace
}  // namespace vramd::shared_memory
