// ModelServices: what a model may ask of the server. Calls into other models go through the
// request path (an identity model; errors for an unknown model and invalid inputs arrive as
// the final result), a decoupled model streams its responses only to a caller that takes
// several (Triton's refusal otherwise), model control acts only in explicit mode, and the
// manager hands its services to every backend it loads.
#include "runtime/model_services.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/server_services.h"
#include "runtime/custom_metrics.h"
#include "runtime/model_manager.h"
#include "support/config_text.h"
#include "support/manager_fixture.h"

namespace vramd {
namespace {

using ::testing::HasSubstr;

// Every result a call received, and a wait for its final one.
class Results {
 public:
  backends::ServerServices::ResultCallback Callback() {
    return [this](Result<InferResponse> response, bool final) {
      std::lock_guard lock(mu_);
      got_.push_back({std::move(response), final});
      if (final) done_.notify_all();
    };
  }
  // Every result once the final one came (fails the test after 10 s).
  std::vector<std::pair<Result<InferResponse>, bool>> Wait() {
    std::unique_lock lock(mu_);
    const bool finished = done_.wait_for(lock, std::chrono::seconds(10), [this] {
      return !got_.empty() && got_.back().second;
    });
    EXPECT_TRUE(finished) << "no final result";
    return std::move(got_);
  }

 private:
  std::mutex mu_;
  std::condition_variable done_;
  std::vector<std::pair<Result<InferResponse>, bool>> got_;
};

std::vector<int32_t> Int32s(const Tensor& t) {
  std::vector<int32_t> v(t.data.size() / sizeof(int32_t));
  std::memcpy(v.data(), t.data.data(), v.size() * sizeof(int32_t));
  return v;
}

// A decoupled model's backend: three responses echoing INPUT0, then the final flag alone. It
// records the services its models were given.
backends::ServerServices* g_services_seen = nullptr;

class StreamInstance : public backends::BackendInstance {
 public:
  Status Execute(const InferRequest&, std::vector<Tensor>*) override {
    return Status::Unsupported("request lists only");
  }
  Status ExecuteRequests(std::span<const backends::ListedRequest> requests) override {
    for (const auto& listed : requests) {
      const Tensor& in = listed.request->inputs[0];
      for (int i = 0; i < 3; ++i) {
        backends::BackendResponse response;
        response.outputs.push_back(Tensor{"OUTPUT0", in.datatype, in.shape, in.data});
        VRAMD_RETURN_IF_ERROR(listed.responder->Respond(
            std::optional<Result<backends::BackendResponse>>(std::move(response)), false));
      }
      VRAMD_RETURN_IF_ERROR(listed.responder->Respond(std::nullopt, true));
    }
    return Status::Ok();
  }
};

class StreamModel : public backends::BackendModel {
 public:
  Result<std::unique_ptr<backends::BackendInstance>> CreateInstance(
      const backends::InstanceContext&) override {
    return std::unique_ptr<backends::BackendInstance>(std::make_unique<StreamInstance>());
  }
};

class StreamBackend : public backends::Backend {
 public:
  std::string_view name() const override { return "services_stream_test"; }
  bool TakesRequestLists() const override { return true; }
  Result<std::unique_ptr<backends::BackendModel>> LoadModel(
      const backends::ModelContext& ctx) override {
    g_services_seen = ctx.services;
    return std::unique_ptr<backends::BackendModel>(std::make_unique<StreamModel>());
  }
};

void RegisterStreamBackend() {
  static StreamBackend backend;
  static bool registered = backends::RegisterBackend(&backend).ok();
  ASSERT_TRUE(registered);
}

class ModelServicesTest : public testing::ManagerTest {
 protected:
  void SetUp() override {
    RegisterStreamBackend();
    WriteModel("ident", testing::Int32ModelConfig("identity", 1));
    WriteModel("stream", testing::Int32ModelConfig("services_stream_test", 1,
                                                   "model_transaction_policy { decoupled: true }\n"));
  }

  std::unique_ptr<runtime::ModelManager> Start(runtime::ModelControlMode mode) {
    auto options = ManagerOptions();
    options.model_control_mode = mode;
    if (mode == runtime::ModelControlMode::kExplicit) options.startup_models = {"*"};
    options.custom_metrics = &registry_;
    return StartManager(options);
  }

  static std::shared_ptr<InferRequest> Request(const std::string& model) {
    auto request = std::make_shared<InferRequest>(testing::Int32Request("bls"));
    request->model_name = model;
    return request;
  }

  runtime::CustomMetricsRegistry registry_;
};

TEST_F(ModelServicesTest, InferAsyncRunsTheRequestOnAnotherModel) {
  auto manager = Start(runtime::ModelControlMode::kExplicit);
  ASSERT_NE(manager, nullptr);
  runtime::ModelServices services(manager.get(), &registry_);
  Results results;
  services.InferAsync(Request("ident"), /*decoupled=*/false, results.Callback());
  auto got = results.Wait();
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].first.ok()) << got[0].first.status().ToString();
  EXPECT_TRUE(got[0].second);
  const InferResponse& response = *got[0].first;
  EXPECT_EQ(response.model_name, "ident");
  ASSERT_EQ(response.outputs.size(), 1u);
  EXPECT_EQ(response.outputs[0].name, "OUTPUT0");
  EXPECT_EQ(Int32s(response.outputs[0]), (std::vector<int32_t>{1, 2}));
}

TEST_F(ModelServicesTest, AnUnknownModelIsAFinalNotFound) {
  auto manager = Start(runtime::ModelControlMode::kExplicit);
  ASSERT_NE(manager, nullptr);
  runtime::ModelServices services(manager.get(), &registry_);
  Results results;
  services.InferAsync(Request("no_such_model"), false, results.Callback());
  auto got = results.Wait();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].second);
  EXPECT_EQ(got[0].first.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(got[0].first.status().message(), HasSubstr("no_such_model"));
}

TEST_F(ModelServicesTest, InvalidInputsAreAFinalInvalidArgument) {
  auto manager = Start(runtime::ModelControlMode::kExplicit);
  ASSERT_NE(manager, nullptr);
  runtime::ModelServices services(manager.get(), &registry_);
  auto request = Request("ident");
  request->inputs[0].name = "NOT_AN_INPUT";
  Results results;
  services.InferAsync(request, false, results.Callback());
  auto got = results.Wait();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].second);
  EXPECT_EQ(got[0].first.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(got[0].first.status().message(), HasSubstr("NOT_AN_INPUT"));
}

TEST_F(ModelServicesTest, ADecoupledModelIsRefusedToACallerThatTakesOneResponse) {
  auto manager = Start(runtime::ModelControlMode::kExplicit);
  ASSERT_NE(manager, nullptr);
  runtime::ModelServices services(manager.get(), &registry_);
  Results results;
  services.InferAsync(Request("stream"), /*decoupled=*/false, results.Callback());
  auto got = results.Wait();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first.status().code(), StatusCode::kInternal);
  EXPECT_EQ(got[0].first.status().message(),
            "Model stream - Error when running inference: Model stream is using the decoupled. "
            "The current BLS request call doesn't support models using the decoupled "
            "transaction policy. Please use 'decoupled=True' argument to the 'exec' or "
            "'async_exec' calls for decoupled models.'");
}

TEST_F(ModelServicesTest, ADecoupledCallGetsEveryResponseThenAFinalOneWithoutOutputs) {
  auto manager = Start(runtime::ModelControlMode::kExplicit);
  ASSERT_NE(manager, nullptr);
  runtime::ModelServices services(manager.get(), &registry_);
  Results results;
  services.InferAsync(Request("stream"), /*decoupled=*/true, results.Callback());
  auto got = results.Wait();
  ASSERT_EQ(got.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(got[i].first.ok()) << got[i].first.status().ToString();
    EXPECT_FALSE(got[i].second);
    ASSERT_EQ(got[i].first->outputs.size(), 1u);
    EXPECT_EQ(Int32s(got[i].first->outputs[0]), (std::vector<int32_t>{1, 2}));
  }
  ASSERT_TRUE(got[3].first.ok()) << got[3].first.status().ToString();
  EXPECT_TRUE(got[3].second);
  EXPECT_TRUE(got[3].first->outputs.empty());
}

TEST_F(ModelServicesTest, ADecoupledCallToAModelThatIsNotGetsOneFinalResponse) {
  auto manager = Start(runtime::ModelControlMode::kExplicit);
  ASSERT_NE(manager, nullptr);
  runtime::ModelServices services(manager.get(), &registry_);
  Results results;
  services.InferAsync(Request("ident"), /*decoupled=*/true, results.Callback());
  auto got = results.Wait();
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].first.ok()) << got[0].first.status().ToString();
  EXPECT_TRUE(got[0].second);
  ASSERT_EQ(got[0].first->outputs.size(), 1u);
  EXPECT_EQ(Int32s(got[0].first->outputs[0]), (std::vector<int32_t>{1, 2}));
}

TEST_F(ModelServicesTest, TheManagerGivesEveryBackendItsServices) {
  g_services_seen = nullptr;
  auto manager = Start(runtime::ModelControlMode::kExplicit);
  ASSERT_NE(manager, nullptr);
  ASSERT_NE(g_services_seen, nullptr);
  EXPECT_TRUE(g_services_seen->IsModelReady("ident", 0));
  auto family = g_services_seen->MetricFamily("from_a_model", "Made by a model.",
                                              backends::MetricKind::kGauge);
  ASSERT_TRUE(family.ok()) << family.status().ToString();
  auto metric = (*family)->Metric({{"model", "stream"}}, {});
  ASSERT_TRUE(metric.ok());
  ASSERT_TRUE((*metric)->Set(4).ok());
  EXPECT_THAT(registry_.PrometheusText(), HasSubstr("from_a_model{model=\"stream\"} 4"))
      << "the manager's services keep metrics in Options::custom_metrics";
  EXPECT_EQ(manager->custom_metrics(), &registry_);
}

TEST_F(ModelServicesTest, ModelControlInExplicitMode) {
  auto manager = Start(runtime::ModelControlMode::kExplicit);
  ASSERT_NE(manager, nullptr);
  runtime::ModelServices services(manager.get(), &registry_);
  EXPECT_TRUE(services.IsModelReady("ident", 0));
  EXPECT_TRUE(services.IsModelReady("ident", 1));
  EXPECT_FALSE(services.IsModelReady("ident", 2));
  EXPECT_FALSE(services.IsModelReady("no_such_model", 0));

  ASSERT_TRUE(services.UnloadModel("ident", false).ok());
  EXPECT_FALSE(services.IsModelReady("ident", 0));
  Status loaded = services.LoadModel("ident", "");
  ASSERT_TRUE(loaded.ok()) << loaded.ToString();
  EXPECT_TRUE(services.IsModelReady("ident", 1));

  Status bad_override = services.LoadModel("ident", "{not json");
  EXPECT_EQ(bad_override.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_override.message(), HasSubstr("config override"));
  EXPECT_EQ(services.LoadModel("no_such_model", "").code(), StatusCode::kNotFound);
}

TEST_F(ModelServicesTest, ModelControlIsUnsupportedOutsideExplicitMode) {
  auto manager = Start(runtime::ModelControlMode::kNone);
  ASSERT_NE(manager, nullptr);
  runtime::ModelServices services(manager.get(), &registry_);
  for (const Status& refused : {services.LoadModel("ident", ""), services.UnloadModel("ident", false)}) {
    EXPECT_EQ(refused.code(), StatusCode::kUnsupported);
    EXPECT_THAT(refused.message(),
                HasSubstr("explicit model load / unload is not allowed if polling is enabled"));
    EXPECT_THAT(refused.message(), HasSubstr("'none'"));
  }
  EXPECT_TRUE(services.IsModelReady("ident", 0)) << "readiness is answered in every mode";
}

TEST_F(ModelServicesTest, MetricsNeedARegistry) {
  auto manager = Start(runtime::ModelControlMode::kExplicit);
  ASSERT_NE(manager, nullptr);
  runtime::ModelServices without(manager.get(), nullptr);
  EXPECT_EQ(without.MetricFamily("m", "d", backends::MetricKind::kCounter).status().code(),
            StatusCode::kUnsupported);
  runtime::ModelServices with(manager.get(), &registry_);
  EXPECT_TRUE(with.MetricFamily("m", "d", backends::MetricKind::kCounter).ok());
}

}  // namespace
}  // namespace vramd
