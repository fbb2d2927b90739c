// The statistics extension: GET /v2/models[/{m}[/versions/{v}]]/stats reports exactly the
// traffic the models were sent, in Triton's JSON shape.
#include "server/http/stats_routes.h"

#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "server/http/kserve_routes.h"
#include "support/scratch_repository.h"

namespace vramd {
namespace {
namespace fs = std::filesystem;

using ScratchRepo = testing::ScratchRepository;

// A batching identity model: INPUT0 is [batch, 2] INT32, batch 1..4; versions 1 and 2 load.
const char* kBatchingIdentity = R"(
backend: "identity"
max_batch_size: 4
version_policy: { all: {} }
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 2 ] } ]
)";

const char* kPlainIdentity = R"(
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] } ]
)";

// A manager on a repository with "alpha" (plain) and "batcher" (versions 1 and 2).
class StatsRoutesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    repo_.AddModel("batcher", kBatchingIdentity, {"1", "2"});
    repo_.AddModel("alpha", kPlainIdentity, {"1"});
    runtime::ModelManager::Options options;
    options.repositories = {repo_.root()};
    options.memory = {&ledger_, &allocator_, nullptr};
    auto manager = runtime::ModelManager::Create(options);
    ASSERT_TRUE(manager.ok()) << manager.status().ToString();
    manager_ = std::move(manager).value();
  }

  // One request with INPUT0 of `shape`, INT32 (or `datatype`, to make it fail validation).
  Result<runtime::InferOutcome> Send(const char* model, int64_t version, Shape shape,
                                     DataType datatype = DataType::kInt32) {
    auto loaded = manager_->Find(model, version);
    if (!loaded.ok()) return loaded.status();
    std::vector<int32_t> data(static_cast<size_t>(ElementCount(shape)), 7);
    InferRequest request;
    request.model_name = model;
    request.inputs.push_back(Tensor{"INPUT0", datatype, std::move(shape),
                                    SharedBuffer::CopyOf(data.data(), data.size() * 4)});
    return (*loaded)->Infer(request);
  }

  rapidjson::Document Stats(std::string_view model, int64_t version, unsigned expect = 200) {
    http::HttpResponse r = http::ModelStatsResponse(*manager_, model, version);
    EXPECT_EQ(r.status, expect) << r.body;
    EXPECT_EQ(r.content_type, "application/json");
    rapidjson::Document doc;
    doc.Parse(r.body.c_str());
    EXPECT_FALSE(doc.HasParseError()) << r.body;
    return doc;
  }

  ScratchRepo repo_;
  memory::Ledger ledger_;
  memory::Allocator allocator_{&ledger_};
  std::unique_ptr<runtime::ModelManager> manager_;
};

uint64_t Count(const rapidjson::Value& stat, const char* key) {
  return stat[key]["count"].GetUint64();
}

TEST_F(StatsRoutesTest, CountsEqualTheTrafficSent) {
  // 3 requests of batch 1, 2 of batch 3: 5 successes, 9 inferences, 5 executions.
  // 2 requests with the wrong datatype: 2 failures, no execution.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Send("batcher", 2, {1, 2}).ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Send("batcher", 2, {3, 2}).ok());
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(Send("batcher", 2, {1, 2}, DataType::kFp32).status().code(),
              StatusCode::kInvalidArgument);
  }
  const uint64_t now_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count());

  rapidjson::Document doc = Stats("batcher", 2);
  ASSERT_TRUE(doc.IsObject() && doc["model_stats"].IsArray());
  ASSERT_EQ(doc["model_stats"].Size(), 1u);
  const auto& m = doc["model_stats"][0];
  EXPECT_STREQ(m["name"].GetString(), "batcher");
  EXPECT_STREQ(m["version"].GetString(), "2");  // a string, as Triton writes it
  EXPECT_EQ(m["inference_count"].GetUint64(), 9u);
  EXPECT_EQ(m["execution_count"].GetUint64(), 5u);
  EXPECT_GT(m["last_inference"].GetUint64(), now_ms - 60'000);
  EXPECT_LE(m["last_inference"].GetUint64(), now_ms);

  const auto& is = m["inference_stats"];
  EXPECT_EQ(Count(is, "success"), 5u);
  EXPECT_EQ(Count(is, "fail"), 2u);
  EXPECT_GT(is["success"]["ns"].GetUint64(), 0u);
  EXPECT_GT(is["fail"]["ns"].GetUint64(), 0u);
  // Each successful request is charged its queue wait and the execution that served it.
  EXPECT_EQ(Count(is, "queue"), 5u);
  EXPECT_EQ(Count(is, "compute_input"), 5u);
  EXPECT_EQ(Count(is, "compute_infer"), 5u);
  EXPECT_EQ(Count(is, "compute_output"), 5u);
  EXPECT_EQ(Count(is, "cache_hit"), 0u);
  EXPECT_EQ(Count(is, "cache_miss"), 0u);
  EXPECT_TRUE(m["response_stats"].IsObject());
  EXPECT_TRUE(m["memory_usage"].IsArray());

  const auto& batches = m["batch_stats"];
  ASSERT_TRUE(batches.IsArray());
  ASSERT_EQ(batches.Size(), 2u);
  EXPECT_EQ(batches[0]["batch_size"].GetUint64(), 1u);
  EXPECT_EQ(Count(batches[0], "compute_infer"), 3u);
  EXPECT_EQ(Count(batches[0], "compute_input"), 3u);
  EXPECT_EQ(Count(batches[0], "compute_output"), 3u);
  EXPECT_EQ(batches[1]["batch_size"].GetUint64(), 3u);
  EXPECT_EQ(Count(batches[1], "compute_infer"), 2u);

  // Version 1 saw nothing.
  rapidjson::Document v1 = Stats("batcher", 1);
  ASSERT_EQ(v1["model_stats"].Size(), 1u);
  EXPECT_EQ(v1["model_stats"][0]["inference_count"].GetUint64(), 0u);
  EXPECT_EQ(v1["model_stats"][0]["last_inference"].GetUint64(), 0u);
  EXPECT_EQ(Count(v1["model_stats"][0]["inference_stats"], "success"), 0u);
  EXPECT_EQ(v1["model_stats"][0]["batch_stats"].Size(), 0u);
}

TEST_F(StatsRoutesTest, ModelWithoutVersionListsEveryReadyVersion) {
  ASSERT_TRUE(Send("batcher", 1, {2, 2}).ok());
  rapidjson::Document doc = Stats("batcher", 0);
  ASSERT_EQ(doc["model_stats"].Size(), 2u);
  EXPECT_STREQ(doc["model_stats"][0]["version"].GetString(), "1");
  EXPECT_STREQ(doc["model_stats"][1]["version"].GetString(), "2");
  EXPECT_EQ(doc["model_stats"][0]["inference_count"].GetUint64(), 2u);
  EXPECT_EQ(doc["model_stats"][1]["inference_count"].GetUint64(), 0u);
}

TEST_F(StatsRoutesTest, NoModelListsEveryVersionByNameThenVersion) {
  ASSERT_TRUE(Send("alpha", 0, {4}).ok());  // no batching: one inference, whatever the shape
  rapidjson::Document doc = Stats("", 0);
  ASSERT_EQ(doc["model_stats"].Size(), 3u);
  EXPECT_STREQ(doc["model_stats"][0]["name"].GetString(), "alpha");
  EXPECT_STREQ(doc["model_stats"][0]["version"].GetString(), "1");
  EXPECT_STREQ(doc["model_stats"][1]["name"].GetString(), "batcher");
  EXPECT_STREQ(doc["model_stats"][1]["version"].GetString(), "1");
  EXPECT_STREQ(doc["model_stats"][2]["name"].GetString(), "batcher");
  EXPECT_STREQ(doc["model_stats"][2]["version"].GetString(), "2");
  const auto& alpha = doc["model_stats"][0];
  EXPECT_EQ(alpha["inference_count"].GetUint64(), 1u);
  EXPECT_EQ(alpha["execution_count"].GetUint64(), 1u);
  ASSERT_EQ(alpha["batch_stats"].Size(), 1u);
  EXPECT_EQ(alpha["batch_stats"][0]["batch_size"].GetUint64(), 1u);
}

TEST_F(StatsRoutesTest, UnknownModelOrVersionIs404) {
  rapidjson::Document doc = Stats("nope", 0, 404);
  ASSERT_TRUE(doc.HasMember("error"));
  EXPECT_NE(std::string(doc["error"].GetString()).find("unknown model: 'nope'"),
            std::string::npos);
  doc = Stats("batcher", 7, 404);
  ASSERT_TRUE(doc.HasMember("error"));
  EXPECT_NE(std::string(doc["error"].GetString()).find("version 7"), std::string::npos);
}

TEST_F(StatsRoutesTest, KServeRoutesServeTheThreeStatsPaths) {
  http::KServeRoutes routes(manager_.get(), nullptr, {});
  auto call = [&](const char* method, const char* target) {
    http::HttpResponse out;
    http::HttpRequest request;
    request.method = method;
    request.target = target;
    routes.Handle(request, [&](http::HttpResponse r) { out = std::move(r); });
    return out;
  };
  auto size = [](const http::HttpResponse& r) {
    rapidjson::Document doc;
    doc.Parse(r.body.c_str());
    return doc.IsObject() && doc.HasMember("model_stats") ? doc["model_stats"].Size() : 999u;
  };
  http::HttpResponse all = call("GET", "/v2/models/stats");
  EXPECT_EQ(all.status, 200u);
  EXPECT_EQ(size(all), 3u);
  http::HttpResponse model = call("GET", "/v2/models/batcher/stats");
  EXPECT_EQ(model.status, 200u);
  EXPECT_EQ(size(model), 2u);
  http::HttpResponse version = call("GET", "/v2/models/batcher/versions/1/stats");
  EXPECT_EQ(version.status, 200u);
  EXPECT_EQ(size(version), 1u);
  EXPECT_EQ(call("GET", "/v2/models/nope/stats").status, 404u);
  EXPECT_EQ(call("POST", "/v2/models/stats").status, 405u);
  EXPECT_EQ(call("POST", "/v2/models/batcher/stats").status, 405u);
}

TEST(ModelStatsToJsonTest, WritesTritonsShapeFromASnapshot) {
  runtime::VersionStatistics v;
  v.model = "m";
  v.version = 3;
  v.stats.last_inference_ms = 1700000000123;
  v.stats.inference_count = 10;
  v.stats.execution_count = 4;
  v.stats.success = {6, 6000};
  v.stats.fail = {1, 50};
  v.stats.queue = {6, 600};
  v.stats.compute_input = {6, 60};
  v.stats.compute_infer = {6, 6006};
  v.stats.compute_output = {6, 66};
  v.stats.batch_stats = {{1, {2, 20}, {2, 200}, {2, 2}}, {4, {2, 40}, {2, 400}, {2, 4}}};
  const std::string json = http::ModelStatsToJson({v});
  EXPECT_EQ(json,
            R"({"model_stats":[{"name":"m","version":"3","last_inference":1700000000123,)"
            R"("inference_count":10,"execution_count":4,"inference_stats":{)"
            R"("success":{"count":6,"ns":6000},"fail":{"count":1,"ns":50},)"
            R"("queue":{"count":6,"ns":600},"compute_input":{"count":6,"ns":60},)"
            R"("compute_infer":{"count":6,"ns":6006},"compute_output":{"count":6,"ns":66},)"
            R"("cache_hit":{"count":0,"ns":0},"cache_miss":{"count":0,"ns":0}},)"
            R"("response_stats":{},"batch_stats":[)"
            R"({"batch_size":1,"compute_input":{"count":2,"ns":20},)"
            R"("compute_infer":{"count":2,"ns":200},"compute_output":{"count":2,"ns":2}},)"
            R"({"batch_size":4,"compute_input":{"count":2,"ns":40},)"
            R"("compute_infer":{"count":2,"ns":400},"compute_output":{"count":2,"ns":4}}],)"
            R"("memory_usage":[]}]})");
  EXPECT_EQ(http::ModelStatsToJson({}), R"({"model_stats":[]})");
}

}  // namespace
}  // namespace vramd
