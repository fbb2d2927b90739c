// Triton's metrics on the metrics page: nv_inference_* samples equal the traffic sent, with
// Triton's names, types and labels; nv_gpu_* come from NVML's figures per GPU uuid.
#include "server/metrics/inference_metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "server/http/metrics_routes.h"

namespace vramd {
namespace {
namespace fs = std::filesystem;

// Expects each line (without its newline) in `text`.
void ExpectLines(const std::string& text, std::initializer_list<std::string> lines) {
  for (const std::string& line : lines) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << "missing: " << line << "\n" << text;
  }
}

// The value of the sample `name{labels}`, or -1 when absent.
double SampleValue(const std::string& text, const std::string& sample) {
  const size_t at = text.find("\n" + sample + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + sample.size() + 2));
}

TEST(InferenceMetricsTest, WritesTritonsFamiliesFromSnapshots) {
  runtime::VersionStatistics v;
  v.model = "m";
  v.version = 3;
  v.stats.inference_count = 10;
  v.stats.execution_count = 4;
  v.stats.success = {6, 6'000'999};  // durations: ns / 1000, rounded down
  v.stats.fail = {3, 50};
  v.stats.fail_by_reason[static_cast<int>(runtime::FailureReason::kBackend)] = 1;
  v.stats.fail_by_reason[static_cast<int>(runtime::FailureReason::kOther)] = 2;
  v.stats.queue = {6, 1500};
  v.stats.compute_input = {6, 2000};
  v.stats.compute_infer = {6, 3'000'000};
  v.stats.compute_output = {6, 999};
  v.stats.pending = 2;

  metrics::PrometheusText out;
  metrics::AppendInferenceMetrics({v}, out);
  const std::string text = out.Take();
  ExpectLines(text, {
      "# HELP nv_inference_request_success Number of successful inference requests, all batch "
      "sizes",
      "# TYPE nv_inference_request_success counter",
      R"(nv_inference_request_success{model="m",version="3"} 6)",
      "# TYPE nv_inference_request_failure counter",
      R"(nv_inference_request_failure{model="m",reason="REJECTED",version="3"} 0)",
      R"(nv_inference_request_failure{model="m",reason="CANCELED",version="3"} 0)",
      R"(nv_inference_request_failure{model="m",reason="BACKEND",version="3"} 1)",
      R"(nv_inference_request_failure{model="m",reason="OTHER",version="3"} 2)",
      "# TYPE nv_inference_count counter",
      R"(nv_inference_count{model="m",version="3"} 10)",
      "# TYPE nv_inference_exec_count counter",
      R"(nv_inference_exec_count{model="m",version="3"} 4)",
      "# TYPE nv_inference_request_duration_us counter",
      R"(nv_inference_request_duration_us{model="m",version="3"} 6000)",
      R"(nv_inference_queue_duration_us{model="m",version="3"} 1)",
      R"(nv_inference_compute_input_duration_us{model="m",version="3"} 2)",
      R"(nv_inference_compute_infer_duration_us{model="m",version="3"} 3000)",
      R"(nv_inference_compute_output_duration_us{model="m",version="3"} 0)",
      "# TYPE nv_inference_pending_request_count gauge",
      R"(nv_inference_pending_request_count{model="m",version="3"} 2)",
  });
}

TEST(InferenceMetricsTest, FamiliesAreWrittenWithoutModels) {
  metrics::PrometheusText out;
  metrics::AppendInferenceMetrics(std::vector<runtime::VersionStatistics>{}, out);
  const std::string text = out.Take();
  ExpectLines(text, {"# TYPE nv_inference_request_success counter",
                     "# TYPE nv_inference_pending_request_count gauge"});
  EXPECT_EQ(text.find("{"), std::string::npos) << text;
}

memory::DeviceMemoryReport Gpu(int ordinal, std::string uuid) {
  memory::DeviceMemoryReport d;
  d.device = memory::Device::Cuda(ordinal);
  d.uuid = std::move(uuid);
  return d;
}

TEST(GpuMetricsTest, OnlyDevicesNvmlAnswersForWithTheirUuid) {
  memory::MemoryReport report;
  memory::DeviceMemoryReport answered = Gpu(0, "GPU-aaaa");
  answered.nvml_memory = memory::NvmlMemoryInfo{
      .total_bytes = 80'000'000'000, .used_bytes = 10'000'000'000, .free_bytes = 70'000'000'000,
      .reserved_bytes = std::nullopt};
  answered.utilization_gpu_percent = 37;
  memory::DeviceMemoryReport memory_only = Gpu(1, "GPU-bbbb");
  memory_only.nvml_memory = memory::NvmlMemoryInfo{
      .total_bytes = 1024, .used_bytes = 512, .free_bytes = 512, .reserved_bytes = std::nullopt};
  memory::DeviceMemoryReport silent = Gpu(2, "");  // NVML did not answer
  silent.utilization_gpu_percent = 99;
  report.devices = {answered, memory_only, silent};

  metrics::PrometheusText out;
  metrics::AppendGpuMetrics(report, out);
  const std::string text = out.Take();
  ExpectLines(text, {
      "# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)",
      "# TYPE nv_gpu_utilization gauge",
      R"(nv_gpu_utilization{gpu_uuid="GPU-aaaa"} 0.37)",
      "# TYPE nv_gpu_memory_total_bytes gauge",
      R"(nv_gpu_memory_total_bytes{gpu_uuid="GPU-aaaa"} 80000000000)",
      R"(nv_gpu_memory_total_bytes{gpu_uuid="GPU-bbbb"} 1024)",
      "# TYPE nv_gpu_memory_used_bytes gauge",
      R"(nv_gpu_memory_used_bytes{gpu_uuid="GPU-aaaa"} 10000000000)",
      R"(nv_gpu_memory_used_bytes{gpu_uuid="GPU-bbbb"} 512)",
  });
  EXPECT_EQ(text.find("GPU-bbbb\"} 0."), std::string::npos) << "no utilization for bbbb";
  EXPECT_EQ(text.find("0.99"), std::string::npos) << text;

  metrics::PrometheusText none;
  metrics::AppendGpuMetrics(memory::MemoryReport{}, none);
  EXPECT_EQ(none.text(), "");  // no GPU: the families are left out, as in Triton
}

// A repository with a batching identity model, served by a ModelManager.
class InferenceMetricsTrafficTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("vramd-metrics-" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "batcher" / "1");
    std::ofstream(root_ / "batcher" / "config.pbtxt") << R"(
backend: "identity"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2 ] } ]
)";
    runtime::ModelManager::Options options;
    options.repositories = {root_};
    options.memory = {&ledger_, &allocator_, nullptr};
    auto manager = runtime::ModelManager::Create(options);
    ASSERT_TRUE(manager.ok()) << manager.status().ToString();
    manager_ = std::move(manager).value();
  }
  void TearDown() override {
    manager_.reset();
    fs::remove_all(root_);
  }

  Status Send(int64_t batch, DataType datatype = DataType::kInt32) {
    auto loaded = manager_->Find("batcher", 0);
    if (!loaded.ok()) return loaded.status();
    std::vector<int32_t> data(static_cast<size_t>(batch * 2), 1);
    InferRequest request;
    request.inputs.push_back(Tensor{"INPUT0", datatype, {batch, 2},
                                    SharedBuffer::CopyOf(data.data(), data.size() * 4)});
    auto outcome = (*loaded)->Infer(request);
    return outcome.ok() ? Status() : outcome.status();
  }

  fs::path root_;
  memory::Ledger ledger_;
  memory::Allocator allocator_{&ledger_};
  std::unique_ptr<runtime::ModelManager> manager_;
};

class FixedSource : public memory::MemoryReportSource {
 public:
  memory::MemoryReport Build() const override { return {}; }
};

TEST_F(InferenceMetricsTrafficTest, SamplesEqualTheTrafficSent) {
  // 4 successes of batch 2 and 1 of batch 4: 12 inferences in 5 executions; 3 failures.
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Send(2).ok());
  ASSERT_TRUE(Send(4).ok());
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(Send(1, DataType::kInt64).ok());

  FixedSource source;
  http::HttpResponse page = http::MetricsResponse(source, manager_.get());
  EXPECT_EQ(page.status, 200u);
  EXPECT_EQ(page.content_type, metrics::kPrometheusContentType);
  const std::string& text = page.body;
  const std::string labels = R"({model="batcher",version="1"})";
  EXPECT_EQ(SampleValue(text, "nv_inference_request_success" + labels), 5);
  EXPECT_EQ(SampleValue(text, "nv_inference_count" + labels), 12);
  EXPECT_EQ(SampleValue(text, "nv_inference_exec_count" + labels), 5);
  EXPECT_EQ(SampleValue(text, "nv_inference_pending_request_count" + labels), 0);
  double failures = 0;
  for (const char* reason : {"REJECTED", "CANCELED", "BACKEND", "OTHER"}) {
    const double v = SampleValue(text, std::string(R"(nv_inference_request_failure{model="batcher",reason=")") +
                                           reason + R"(",version="1"})");
    ASSERT_GE(v, 0) << reason << "\n" << text;
    failures += v;
  }
  EXPECT_EQ(failures, 3);
  for (const char* family : {"nv_inference_request_duration_us", "nv_inference_queue_duration_us",
                             "nv_inference_compute_input_duration_us",
                             "nv_inference_compute_infer_duration_us",
                             "nv_inference_compute_output_duration_us"}) {
    EXPECT_GE(SampleValue(text, family + labels), 0) << family << "\n" << text;
  }
  // vramd's own families follow Triton's on the same page.
  ExpectLines(text, {"# TYPE vramd_memory_live_bytes gauge", "vramd_nvml_available 0"});
  EXPECT_LT(text.find("nv_inference_request_success"), text.find("vramd_memory_live_bytes"));

  // Every sample line is "name{labels} value" or "name value".
  const std::regex sample(R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? [-+0-9.eEInfNa]+$)");
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    if (!line.empty() && line[0] != '#') {
      EXPECT_TRUE(std::regex_match(line, sample)) << line;
    }
    start = end + 1;
  }
}

TEST_F(InferenceMetricsTrafficTest, WithoutAManagerThePageHasOnlyMemoryAndGpuFamilies) {
  FixedSource source;
  http::HttpResponse page = http::MetricsResponse(source, nullptr);
  EXPECT_EQ(page.body.find("nv_inference_"), std::string::npos);
  EXPECT_NE(page.body.find("# TYPE vramd_memory_leaked_bytes_total counter\n"),
            std::string::npos);
}

}  // namespace
}  // namespace vramd
