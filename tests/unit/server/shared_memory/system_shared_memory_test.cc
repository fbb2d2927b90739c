// SystemSharedMemory: regions of a client's POSIX shared memory, each range checked, mapped
// while registered or used.
#include "server/shared_memory/system_shared_memory.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

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

TEST(SystemSharedMemoryTest, ARegisteredRangeIsReadAndWrittenInPlace) {
  Object object(8192);
  SystemSharedMemory shm;
  ASSERT_TRUE(shm.Register("r", object.key(), 100, 1000).ok());
  auto slice = shm.Find("r", 10, 20, "input 'X'");
  ASSERT_TRUE(slice.ok()) << slice.status().ToString();
  EXPECT_EQ(slice->size, 20u);
  EXPECT_EQ(static_cast<unsigned char>(slice->data[0]), 110);  // object byte 100 + 10
  auto listed = shm.List("");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].key, object.key());
  EXPECT_EQ((*listed)[0].offset, 100u);
  EXPECT_EQ(shm.RegisteredBytes(), 1000u);

  // Unregistered while held: the slice stays mapped and writable until it goes.
  ASSERT_TRUE(shm.Unregister("r").ok());
  slice->data[0] = std::byte{7};
  EXPECT_EQ(slice->data[0], std::byte{7});
  EXPECT_FALSE(shm.Find("r", 0, 1, "input 'X'").ok());
  EXPECT_EQ(shm.List("r").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(shm.RegisteredBytes(), 0u);
}

TEST(SystemSharedMemoryTest, EveryRangeAndKeyIsChecked) {
  Object object(4096);
  SystemSharedMemory shm;
  for (const char* key : {"", "/", "noslash", "/a/b"}) {
    Status s = shm.Register("r", key, 0, 16);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << key;
    EXPECT_THAT(s.message(), HasSubstr("no other '/'")) << key;
  }
  EXPECT_THAT(shm.Register("r", object.key(), 4000, 200).message(),
              HasSubstr("beyond the 4096 bytes"));
  EXPECT_EQ(shm.Register("r", "/vramd_no_such_object_ever", 0, 16).code(), StatusCode::kNotFound);
  EXPECT_EQ(shm.Register("", object.key(), 0, 16).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(shm.Register("r", object.key(), 0, 0).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(shm.Register("r", object.key(), 0, 100).ok());
  EXPECT_EQ(shm.Register("r", object.key(), 0, 100).code(), StatusCode::kAlreadyExists);
  auto over = shm.Find("r", 90, 11, "output 'Y'");
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(over.status().message(),
              HasSubstr("output 'Y': 11 bytes at offset 90 are beyond shared memory region 'r' (100 bytes)"));
  EXPECT_FALSE(shm.Find("r", UINT64_MAX, 2, "x").ok());
  EXPECT_EQ(shm.Find("other", 0, 1, "x").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(shm.Unregister("").ok());
  EXPECT_TRUE(shm.Unregister("never").ok());
}

// With a ledger, a region is client-owned host memory while mapped: charged to an owner of its
// own until it is unregistered and no request holds it, then closed clean (no leak).
TEST(SystemSharedMemoryTest, ARegionIsChargedInTheLedgerWhileMapped) {
  Object object(4096);
  memory::Ledger ledger;
  SystemSharedMemory shm(&ledger);
  auto live = [&]() -> int64_t {
    for (const auto& o : ledger.Snapshot()) {
      if (o.name == "client-shm:r" && !o.closed) return o.self.live_bytes;
    }
    return -1;
  };
  ASSERT_TRUE(shm.Register("r", object.key(), 96, 1000).ok());
  EXPECT_EQ(live(), 1000);
  auto slice = shm.Find("r", 0, 10, "input 'X'");
  ASSERT_TRUE(slice.ok());
  ASSERT_TRUE(shm.Unregister("r").ok());
  EXPECT_EQ(live(), 1000) << "still mapped for the request that holds it";
  *slice = SystemSharedMemory::Slice();
  EXPECT_EQ(live(), -1);
  size_t leaks = 0;
  for (const auto& o : ledger.Snapshot()) leaks += o.self.live_count > 0 && o.name != "server";
  EXPECT_EQ(leaks, 0u);
}

}  // namespace
}  // namespace vramd::shared_memory
