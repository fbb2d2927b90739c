#include "memory/memory_report.h"

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <string>

#include "server/http/memory_routes.h"
#include "server/http/metrics_routes.h"
#include "server/metrics/memory_metrics.h"
#include "server/metrics/memory_report_text.h"

namespace vramd::memory {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// One GPU whose driver says this process uses `process_used` bytes.
class FakeNvml : public Nvml {
 public:
  explicit FakeNvml(uint64_t process_used) : process_used_(process_used) {}
  int DeviceCount() const override { return 1; }
  Result<NvmlMemoryInfo> DeviceMemory(int ordinal) const override {
    if (ordinal != 0) return Status::Unavailable("no such device");
    return NvmlMemoryInfo{80 * 1024 * kMiB, 10 * 1024 * kMiB, 70 * 1024 * kMiB, 512 * kMiB};
  }
  Result<uint64_t> ProcessUsedBytes(int ordinal, uint32_t pid) const override {
    if (ordinal != 0) return Status::Unavailable("no such device");
    return process_used_;
  }
  Result<NvmlUtilization> Utilization(int) const override { return NvmlUtilization{37, 5}; }
  Result<std::string> Name(int) const override { return std::string("Fake GPU"); }
  Result<std::string> Uuid(int) const override { return std::string("GPU-fake"); }

 private:
  uint64_t process_used_;
};

PoolStats CudaPool(size_t reserved, size_t allocated) {
  PoolStats p;
  p.device = Device::Cuda(0);
  p.reserved_bytes = reserved;
  p.allocated_bytes = allocated;
  p.peak_reserved_bytes = reserved;
  p.peak_allocated_bytes = allocated;
  p.segments = 3;
  p.fragmentation = 0.25;
  return p;
}

rapidjson::Document Parse(const std::string& json) {
  rapidjson::Document doc;
  doc.Parse(json.c_str());
  EXPECT_FALSE(doc.HasParseError()) << json;
  return doc;
}

// A model > version > instance chain, as the runtime opens it.
struct ModelOwners {
  explicit ModelOwners(Ledger& ledger)
      : model(ledger.OpenOwner(kNoOwner, OwnerKind::kModel, "add_sub")),
        version(ledger.OpenOwner(model, OwnerKind::kVersion, "1")),
        instance(ledger.OpenOwner(version, OwnerKind::kInstance, "add_sub_0")) {}
  OwnerId model, version, instance;
};

TEST(MemoryReportTest, OwnerTreeNestsModelVersionInstanceWithLiveAndPeak) {
  Ledger ledger;
  Allocator allocator(&ledger);
  ModelOwners owners(ledger);
  auto big = allocator.Allocate(Device::Cpu(), 3000, 0, owners.instance);
  auto small = allocator.Allocate(Device::Cpu(), 1000, 0, owners.instance);
  ASSERT_TRUE(big.ok() && small.ok());
  big->Reset();  // live 1000, peak 4000

  MemoryReport report = BuildMemoryReport(ledger, allocator, nullptr, {});
  auto doc = Parse(MemoryReportToJson(report));
  const auto& root = doc["owners"];
  EXPECT_STREQ(root["kind"].GetString(), "server");
  EXPECT_EQ(root["subtree_live_bytes"].GetInt64(), 1000);
  ASSERT_EQ(root["children"].Size(), 1u);
  const auto& model = root["children"][0];
  EXPECT_STREQ(model["kind"].GetString(), "model");
  EXPECT_STREQ(model["name"].GetString(), "add_sub");
  const auto& instance = model["children"][0]["children"][0];
  EXPECT_STREQ(instance["kind"].GetString(), "instance");
  EXPECT_STREQ(instance["name"].GetString(), "add_sub_0");
  EXPECT_EQ(std::string(instance["path"].GetString()), ledger.OwnerPath(owners.instance));
  EXPECT_EQ(instance["live_bytes"].GetInt64(), 1000);
  EXPECT_EQ(instance["live_count"].GetInt64(), 1);
  EXPECT_EQ(instance["peak_bytes"].GetInt64(), 4000);
  EXPECT_EQ(instance["total_allocated_bytes"].GetInt64(), 4000);
  EXPECT_EQ(instance["by_device"]["cpu"].GetInt64(), 1000);
  EXPECT_FALSE(instance["closed"].GetBool());
  EXPECT_EQ(instance["children"].Size(), 0u);

  ASSERT_EQ(doc["pools"].Size(), 1u);
  EXPECT_STREQ(doc["pools"][0]["device"].GetString(), "cpu");
  EXPECT_GE(doc["pools"][0]["reserved_bytes"].GetUint64(), 1000u);
  EXPECT_FALSE(doc["nvml"]["available"].GetBool());
  EXPECT_EQ(doc["leaks"].Size(), 0u);
  EXPECT_EQ(doc["leaked_bytes_total"].GetUint64(), 0u);
}

TEST(MemoryReportTest, DeviceNoteSaysWhatTheHoldersCannot) {
  Ledger ledger;
  FakeNvml nvml(1024 * kMiB);
  std::vector<ContextBaseline> baselines{{0, 500 * kMiB, ""}};
  MemoryReport report =
      BuildMemoryReport(ledger, {CudaPool(64 * kMiB, 40 * kMiB)}, &nvml, baselines);
  EXPECT_EQ(DeviceMemoryNote(report, Device::Cuda(0)),
            "NVML: cuda:0 has 70.00 GiB free of 80.00 GiB; this process uses 1.00 GiB: 64.0 MiB "
            "in vramd's pool, 500.0 MiB its CUDA context, 460.0 MiB unattributed.");
  // Devices the report does not list have nothing to add.
  EXPECT_EQ(DeviceMemoryNote(report, Device::Cpu()), "");
  EXPECT_EQ(DeviceMemoryNote(report, Device::Cuda(3)), "");
}

TEST(MemoryReportTest, ClosedOwnerHoldingMemoryIsListedAsALeak) {
  Ledger ledger;
  Allocator allocator(&ledger);
  ModelOwners owners(ledger);
  OwnerId request = ledger.OpenOwner(owners.instance, OwnerKind::kRequest, "42");
  auto ptr = allocator.AllocateRaw(Device::Cpu(), 4096, 0, request);
  ASSERT_TRUE(ptr.ok());
  ASSERT_EQ(ledger.CloseOwner(request).size(), 1u);

  auto doc = Parse(MemoryReportToJson(BuildMemoryReport(ledger, allocator, nullptr, {})));
  ASSERT_EQ(doc["leaks"].Size(), 1u);
  const auto& leak = doc["leaks"][0];
  EXPECT_NE(std::string(leak["owner"].GetString()).find("request:42"), std::string::npos);
  EXPECT_STREQ(leak["kind"].GetString(), "request");
  EXPECT_EQ(leak["bytes"].GetUint64(), 4096u);
  EXPECT_EQ(leak["count"].GetUint64(), 1u);
  EXPECT_EQ(leak["still_live_bytes"].GetUint64(), 4096u);
  EXPECT_TRUE(leak["closed_at"].IsString());
  ASSERT_EQ(leak["allocations"].Size(), 1u);
  const auto& a = leak["allocations"][0];
  EXPECT_EQ(std::string(a["address"].GetString()).rfind("0x", 0), 0u);
  EXPECT_EQ(a["size"].GetUint64(), 4096u);
  EXPECT_STREQ(a["device"].GetString(), "cpu");
  EXPECT_GE(a["age_ms"].GetInt64(), 0);
  EXPECT_TRUE(a["backtrace"].IsArray());
  EXPECT_EQ(doc["leaked_bytes_total"].GetUint64(), 4096u);
  EXPECT_EQ(doc["leak_reports_total"].GetUint64(), 1u);

  allocator.Free(Device::Cpu(), *ptr);
  auto after = Parse(MemoryReportToJson(BuildMemoryReport(ledger, allocator, nullptr, {})));
  EXPECT_EQ(after["leaks"][0]["still_live_bytes"].GetUint64(), 0u);
}

TEST(MemoryReportTest, UnattributedIsProcessUsedMinusPoolReservedMinusBaseline) {
  Ledger ledger;
  FakeNvml nvml(1024 * kMiB);
  std::vector<ContextBaseline> baselines{{0, 500 * kMiB, ""}};
  MemoryReport report =
      BuildMemoryReport(ledger, {CudaPool(64 * kMiB, 40 * kMiB)}, &nvml, baselines);
  ASSERT_FALSE(report.devices.empty());
  const DeviceMemoryReport& d = report.devices[0];
  EXPECT_EQ(d.device, Device::Cuda(0));
  ASSERT_TRUE(d.unattributed_bytes.has_value());
  EXPECT_EQ(*d.unattributed_bytes, (1024 - 64 - 500) * kMiB);

  auto doc = Parse(MemoryReportToJson(report));
  EXPECT_TRUE(doc["nvml"]["available"].GetBool());
  const auto& dev = doc["devices"][0];
  EXPECT_STREQ(dev["device"].GetString(), "cuda:0");
  EXPECT_STREQ(dev["name"].GetString(), "Fake GPU");
  EXPECT_STREQ(dev["uuid"].GetString(), "GPU-fake");
  EXPECT_EQ(dev["total_bytes"].GetInt64(), 80 * 1024 * kMiB);
  EXPECT_EQ(dev["driver_reserved_bytes"].GetInt64(), 512 * kMiB);
  EXPECT_EQ(dev["utilization_gpu_percent"].GetInt64(), 37);
  EXPECT_EQ(dev["process_used_bytes"].GetInt64(), 1024 * kMiB);
  EXPECT_EQ(dev["pool_reserved_bytes"].GetInt64(), 64 * kMiB);
  EXPECT_EQ(dev["pool_segments"].GetInt64(), 3);
  EXPECT_DOUBLE_EQ(dev["pool_fragmentation"].GetDouble(), 0.25);
  EXPECT_EQ(dev["context_baseline_bytes"].GetInt64(), 500 * kMiB);
  EXPECT_EQ(dev["unattributed_bytes"].GetInt64(), 460 * kMiB);
  const auto& u = doc["unattributed"][0];
  EXPECT_STREQ(u["device"].GetString(), "cuda:0");
  EXPECT_EQ(u["bytes"].GetInt64(), 460 * kMiB);
  EXPECT_EQ(u["nvml_process_used_bytes"].GetInt64(), 1024 * kMiB);
  EXPECT_EQ(u["pool_reserved_bytes"].GetInt64(), 64 * kMiB);
  EXPECT_EQ(u["context_baseline_bytes"].GetInt64(), 500 * kMiB);
}

TEST(MemoryReportTest, UnattributedIsNegativeWhenPoolsAndBaselineExceedNvml) {
  Ledger ledger;
  FakeNvml nvml(600 * kMiB);
  std::vector<ContextBaseline> baselines{{0, 500 * kMiB, ""}};
  MemoryReport report =
      BuildMemoryReport(ledger, {CudaPool(128 * kMiB, 0)}, &nvml, baselines);
  ASSERT_TRUE(report.devices.at(0).unattributed_bytes.has_value());
  EXPECT_EQ(*report.devices[0].unattributed_bytes, -28 * kMiB);
}

// NVML knows this process (pid 100) and one host (pid 200); pid 300 has no context here.
class HostsNvml : public FakeNvml {
 public:
  HostsNvml() : FakeNvml(1024 * kMiB) {}
  Result<uint64_t> ProcessUsedBytes(int ordinal, uint32_t pid) const override {
    if (pid == 200) return uint64_t{700 * kMiB};
    if (pid == 300) return Status::NotFound("pid 300 is not in NVML's list");
    return FakeNvml::ProcessUsedBytes(ordinal, pid);
  }
};

TEST(MemoryReportTest, HostProcessesShowTheirNvmlFigureUnderTheirModelApartFromUnattributed) {
  Ledger ledger;
  ModelOwners owners(ledger);
  HostedProcesses hosts;
  auto gpu_host = hosts.Add({200, owners.version, "model 'add_sub' version 1 (GPU 0)"});
  auto cpu_host = hosts.Add({300, owners.version, "model 'add_sub' version 1 (CPU)"});
  HostsNvml nvml;
  MemoryReportOptions options;
  options.pid = 100;
  options.hosted = &hosts;
  std::vector<ContextBaseline> baselines{{0, 500 * kMiB, ""}};
  MemoryReport report = BuildMemoryReport(ledger, {CudaPool(64 * kMiB, 40 * kMiB)}, &nvml,
                                          baselines, options);
  ASSERT_EQ(report.devices.size(), 1u);
  const DeviceMemoryReport& d = report.devices[0];
  ASSERT_EQ(d.hosted.size(), 1u);  // pid 300 has no context on the device
  EXPECT_EQ(d.hosted[0].pid, 200u);
  EXPECT_EQ(d.hosted[0].owner, ledger.OwnerPath(owners.version));
  EXPECT_EQ(d.hosted_used_bytes, 700 * kMiB);
  EXPECT_EQ(*d.unattributed_bytes, (1024 - 64 - 500) * kMiB);  // another process's memory

  auto doc = Parse(MemoryReportToJson(report));
  const auto& dev = doc["devices"][0];
  EXPECT_EQ(dev["hosted_used_bytes"].GetInt64(), 700 * kMiB);
  ASSERT_EQ(dev["hosted_processes"].Size(), 1u);
  const auto& h = dev["hosted_processes"][0];
  EXPECT_EQ(h["pid"].GetInt64(), 200);
  EXPECT_EQ(std::string(h["owner"].GetString()), "server/model:add_sub/version:1");
  EXPECT_STREQ(h["label"].GetString(), "model 'add_sub' version 1 (GPU 0)");
  EXPECT_EQ(h["used_bytes"].GetInt64(), 700 * kMiB);

  auto text_or = metrics::RenderMemoryReportText(MemoryReportToJson(report));
  ASSERT_TRUE(text_or.ok());
  const std::string text = *text_or;
  EXPECT_NE(text.find("host pid 200"), std::string::npos) << text;
  EXPECT_NE(text.find("server/model:add_sub/version:1"), std::string::npos) << text;
  EXPECT_NE(metrics::RenderMemoryMetrics(report).find("vramd_hosted_process_gpu_used_bytes{device=\"cuda:0\",pid=\"200\""),
            std::string::npos);

  gpu_host.reset();  // the host ended: no longer listed
  EXPECT_TRUE(BuildMemoryReport(ledger, {}, &nvml, baselines, options).devices[0].hosted.empty());
}

TEST(MemoryReportTest, WithoutNvmlEveryNvmlFigureIsNullWithTheReason) {
  Ledger ledger;
  MemoryReportOptions options;
  options.nvml_unavailable_reason = "NVML unavailable: cannot load libnvidia-ml.so.1";
  std::vector<ContextBaseline> baselines{{0, std::nullopt, "NVML unavailable at start-up"}};
  auto doc = Parse(MemoryReportToJson(
      BuildMemoryReport(ledger, {CudaPool(2 * kMiB, 0)}, nullptr, baselines, options)));
  EXPECT_FALSE(doc["nvml"]["available"].GetBool());
  EXPECT_STREQ(doc["nvml"]["reason"].GetString(), options.nvml_unavailable_reason.c_str());
  const auto& dev = doc["devices"][0];
  EXPECT_FALSE(dev["nvml"]["available"].GetBool());
  EXPECT_TRUE(dev["total_bytes"].IsNull());
  EXPECT_TRUE(dev["process_used_bytes"].IsNull());
  EXPECT_TRUE(dev["context_baseline_bytes"].IsNull());
  EXPECT_TRUE(dev["unattributed_bytes"].IsNull());
  EXPECT_NE(std::string(dev["unattributed_reason"].GetString()).find("cannot load"),
            std::string::npos);
  EXPECT_EQ(dev["pool_reserved_bytes"].GetInt64(), 2 * kMiB);
  EXPECT_TRUE(doc["unattributed"][0]["bytes"].IsNull());
  EXPECT_FALSE(std::string(doc["unattributed"][0]["reason"].GetString()).empty());
}

TEST(MemoryReportTest, MetricsCarryOwnerPoolLeakAndNvmlSamples) {
  Ledger ledger;
  Allocator allocator(&ledger);
  ModelOwners owners(ledger);
  auto held = allocator.Allocate(Device::Cpu(), 1000, 0, owners.instance);
  auto at_version = allocator.Allocate(Device::Cpu(), 24, 0, owners.version);
  OwnerId request = ledger.OpenOwner(owners.instance, OwnerKind::kRequest, "7");
  auto leaked = allocator.AllocateRaw(Device::Cpu(), 512, 0, request);
  ASSERT_TRUE(held.ok() && at_version.ok() && leaked.ok());
  ledger.CloseOwner(request);  // the leaked 512 bytes stay charged to the closed request

  FakeNvml nvml(1024 * kMiB);
  std::vector<PoolStats> pools = allocator.PoolStatistics();
  pools.push_back(CudaPool(64 * kMiB, 40 * kMiB));
  MemoryReport report = BuildMemoryReport(ledger, pools, &nvml, {{0, 500 * kMiB, ""}});
  const std::string text = metrics::RenderMemoryMetrics(report);
  auto has = [&](const std::string& line) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << "missing: " << line << "\n" << text;
  };
  has("# TYPE vramd_memory_live_bytes gauge");
  has(R"(vramd_memory_live_bytes{model="add_sub",version="1",instance="add_sub_0",device="cpu"} 1512)");
  has(R"(vramd_memory_live_bytes{model="add_sub",version="1",instance="",device="cpu"} 24)");
  has("# TYPE vramd_memory_leaked_bytes_total counter");
  has("vramd_memory_leaked_bytes_total 512");
  has("vramd_memory_leak_reports_total 1");
  has(R"(vramd_pool_reserved_bytes{device="cuda:0"} 67108864)");
  has(R"(vramd_pool_allocated_bytes{device="cuda:0"} 41943040)");
  has(R"(vramd_pool_fragmentation_ratio{device="cuda:0"} 0.25)");
  has(R"(vramd_memory_unattributed_bytes{device="cuda:0"} 482344960)");
  has(R"(vramd_gpu_memory_total_bytes{device="cuda:0"} 85899345920)");
  has(R"(vramd_gpu_memory_used_bytes{device="cuda:0"} 10737418240)");
  has(R"(vramd_gpu_utilization_ratio{device="cuda:0"} 0.37)");
  has("vramd_nvml_available 1");
  has(R"(vramd_memory_unattributed_alarm{device="cuda:0"} 0)");
  EXPECT_NE(text.find("vramd_pool_reserved_bytes{device=\"cpu\"} "), std::string::npos);

  // 460 MiB that no owner holds is past an alarm's 256 MiB.
  UnattributedAlarm alarm(256 * kMiB);
  MemoryReportOptions options;
  options.unattributed_alarm = &alarm;
  const std::string alarmed = metrics::RenderMemoryMetrics(
      BuildMemoryReport(ledger, pools, &nvml, {{0, 500 * kMiB, ""}}, options));
  EXPECT_NE(alarmed.find("vramd_memory_unattributed_alarm{device=\"cuda:0\"} 1\n"),
            std::string::npos)
      << alarmed;
  EXPECT_NE(alarmed.find("# TYPE vramd_memory_unattributed_alarms_total counter\n"
                         "vramd_memory_unattributed_alarms_total{device=\"cuda:0\"} 1\n"),
            std::string::npos)
      << alarmed;

  allocator.Free(Device::Cpu(), *leaked);
}

class FixedSource : public MemoryReportSource {
 public:
  explicit FixedSource(MemoryReport report) : report_(std::move(report)) {}
  MemoryReport Build() const override { return report_; }

 private:
  MemoryReport report_;
};

TEST(MemoryReportTest, RoutesAnswerJsonAndPrometheusText) {
  Ledger ledger;
  FixedSource source(BuildMemoryReport(ledger, std::vector<PoolStats>{}, nullptr, {}));
  http::HttpResponse json = http::MemoryReportResponse(source);
  EXPECT_EQ(json.status, 200u);
  EXPECT_EQ(json.content_type, "application/json");
  auto doc = Parse(json.body);
  EXPECT_TRUE(doc.HasMember("devices") && doc.HasMember("owners") && doc.HasMember("leaks"));

  http::HttpResponse prom = http::MetricsResponse(source);
  EXPECT_EQ(prom.status, 200u);
  EXPECT_EQ(prom.content_type, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(prom.body.find("# TYPE vramd_memory_leaked_bytes_total counter\n"),
            std::string::npos);
  EXPECT_NE(prom.body.find("vramd_nvml_available 0\n"), std::string::npos);
}

TEST(MemoryReportTest, VramctlRendersTheServersJson) {
  Ledger ledger;
  Allocator allocator(&ledger);
  ModelOwners owners(ledger);
  auto held = allocator.Allocate(Device::Cpu(), 3 * kMiB, 0, owners.instance);
  ASSERT_TRUE(held.ok());
  FakeNvml nvml(1024 * kMiB);
  std::vector<PoolStats> pools = allocator.PoolStatistics();
  pools.push_back(CudaPool(64 * kMiB, 40 * kMiB));
  auto text = metrics::RenderMemoryReportText(MemoryReportToJson(
      BuildMemoryReport(ledger, pools, &nvml, {{0, 500 * kMiB, ""}})));
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_NE(text->find("unattributed  460.0 MiB = process 1.0 GiB - pool 64.0 MiB - context "
                       "500.0 MiB"),
            std::string::npos)
      << *text;
  EXPECT_NE(text->find("      instance:add_sub_0"), std::string::npos) << *text;
  EXPECT_NE(text->find("3.0 MiB"), std::string::npos) << *text;
}

}  // namespace
}  // namespace vramd::memory
