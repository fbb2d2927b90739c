// The per-execute memory log (runtime/execute_memory_log.h): the parameter's values, the line's
// figures (NVML's process figure, the instance's and the server's ledger bytes, each pool's
// reserved and allocated bytes, before and after), and a model that turns it on still serving.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "memory/allocator.h"
#include "memory/ledger.h"
#include "memory/nvml.h"
#include "runtime/execute_memory_log.h"
#include "support/config_text.h"
#include "support/manager_fixture.h"

namespace vramd::runtime {
namespace {

using ::testing::HasSubstr;

// One device on which this process uses `used` bytes.
class FakeNvml : public memory::Nvml {
 public:
  uint64_t used = 0;
  int DeviceCount() const override { return 1; }
  Result<memory::NvmlMemoryInfo> DeviceMemory(int) const override {
    return Status::Unavailable("fake");
  }
  Result<uint64_t> ProcessUsedBytes(int, uint32_t pid) const override {
    if (pid != static_cast<uint32_t>(getpid())) return Status::NotFound("other process");
    return used;
  }
  Result<memory::NvmlUtilization> Utilization(int) const override {
    return Status::Unavailable("fake");
  }
  Result<std::string> Name(int) const override { return std::string("fake"); }
  Result<std::string> Uuid(int) const override { return std::string("GPU-fake"); }
};

config::ModelConfig WithParameter(const std::string& value) {
  config::ModelConfig c;
  (*c.mutable_parameters())[kExecuteMemoryLogParameter].set_string_value(value);
  return c;
}

TEST(ExecuteMemoryLogTest, TheParameterTurnsItOnOrOffAndRefusesAnythingElse) {
  memory::Ledger ledger;
  memory::Allocator allocator(&ledger);
  MemoryContext memory{&ledger, &allocator, nullptr, nullptr};
  EXPECT_FALSE(ExecuteMemoryLog::From(config::ModelConfig(), memory, "m")->has_value());
  for (const char* on : {"1", "true", "on", "yes"})
    EXPECT_TRUE(ExecuteMemoryLog::From(WithParameter(on), memory, "m")->has_value()) << on;
  for (const char* off : {"", "0", "false", "off", "no"})
    EXPECT_FALSE(ExecuteMemoryLog::From(WithParameter(off), memory, "m")->has_value()) << off;
  auto bad = ExecuteMemoryLog::From(WithParameter("loud"), memory, "m");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("VRAMD_LOG_EXECUTE_MEMORY: 'loud'"));
}

TEST(ExecuteMemoryLogTest, TheLineShowsEachFigureBeforeAndAfter) {
  memory::Ledger ledger;
  memory::Allocator allocator(&ledger);
  FakeNvml nvml;
  nvml.used = 800u << 20;
  MemoryContext memory{&ledger, &allocator, nullptr, &nvml};
  auto log = ExecuteMemoryLog::From(WithParameter("1"), memory, "model 'm' version 1");
  ASSERT_TRUE(log.ok() && log->has_value());
  const memory::OwnerId instance =
      ledger.OpenOwner(ledger.root(), memory::OwnerKind::kInstance, "m_0_0");

  auto before = (*log)->Take(instance);
  std::optional<memory::Buffer> kept;
  {
    memory::OwnerScope scope(instance);
    auto buffer = allocator.Allocate(memory::Device::Cpu(), 3 << 20);  // what an execute keeps
    ASSERT_TRUE(buffer.ok());
    kept = std::move(buffer).value();
  }
  nvml.used = 804u << 20;
  auto after = (*log)->Take(instance);
  const std::string line = (*log)->Line(instance, 2, before, after);
  EXPECT_THAT(line, HasSubstr("execute memory: model 'm' version 1"));
  EXPECT_THAT(line, HasSubstr("instance:m_0_0, 2 request(s)"));
  EXPECT_THAT(line, HasSubstr("process (NVML) 800.0 -> 804.0 MiB"));
  EXPECT_THAT(line, HasSubstr("ledger instance 0.0 -> 3.0 MiB (+3145728)"));
  EXPECT_THAT(line, HasSubstr("pools (reserved / allocated) cpu"));

  // Without NVML the line says so rather than leaving the figure out silently.
  MemoryContext no_nvml{&ledger, &allocator, nullptr, nullptr};
  auto plain = ExecuteMemoryLog::From(WithParameter("on"), no_nvml, "model 'm' version 1");
  auto f = (*plain)->Take(instance);
  EXPECT_THAT((*plain)->Line(instance, 1, f, f), HasSubstr("process (NVML) unavailable"));
  kept.reset();
  ledger.CloseOwner(instance);
}

class ExecuteMemoryLogModelTest : public testing::ManagerTest {};

TEST_F(ExecuteMemoryLogModelTest, AModelAsksWithAParameterAndABadValueFailsItsLoad) {
  WriteModel("logged", testing::Int32ModelConfig(
                           "identity", 1,
                           "parameters { key: \"VRAMD_LOG_EXECUTE_MEMORY\" value { string_value: "
                           "\"1\" } }\n"));
  WriteModel("bad", testing::Int32ModelConfig(
                        "identity", 1,
                        "parameters { key: \"VRAMD_LOG_EXECUTE_MEMORY\" value { string_value: "
                        "\"maybe\" } }\n"));
  auto manager = StartManager(ManagerOptions());
  ASSERT_NE(manager, nullptr);
  auto model = manager->Find("logged", 0);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  EXPECT_TRUE((*model)->Infer(testing::Int32Request("r")).ok());
  auto bad = manager->Find("bad", 0);
  ASSERT_FALSE(bad.ok());
  auto index = manager->Index();
  bool seen = false;
  for (const auto& row : index) {
    if (row.name == "bad") {
      seen = true;
      EXPECT_THAT(row.reason, HasSubstr("VRAMD_LOG_EXECUTE_MEMORY: 'maybe'"));
    }
  }
  EXPECT_TRUE(seen);
}

}  // namespace
}  // namespace vramd::runtime
