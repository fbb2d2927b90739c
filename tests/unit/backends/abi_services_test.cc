// The C entry points over ServerServices (abi_services.cc), called through a ServerApi's table
// as a backend calls them: infer_async makes the request from the call and hands each response
// over as a VramdInferResult; model control and metrics relay the services' answers (Triton's
// texts unchanged); malformed calls and a server without services are refused with a code and
// a message, never an exception.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/abi/abi_bridge.h"
#include "backends/server_services.h"
#include "core/shared_buffer.h"
#include "memory/allocator.h"
#include "memory/cuda_devices.h"
#include "memory/ledger.h"
#include "runtime/custom_metrics.h"
#include "vramd/backend.h"

namespace vramd::backends {
namespace {

using ::testing::HasSubstr;

// Records what it is asked and answers as the test sets it up.
class FakeServices : public ServerServices {
 public:
  void InferAsync(std::shared_ptr<InferRequest> request, bool decoupled,
                  ResultCallback on_result) override {
    if (throw_on_infer) throw std::runtime_error("fake services threw");
    seen = request;
    seen_decoupled = decoupled;
    for (auto& [response, final] : answers) on_result(response, final);
  }
  Status LoadModel(std::string_view model, std::string_view config_json,
                   const ModelFiles& files = {}) override {
    loads.push_back(std::string(model) + "|" + std::string(config_json));
    for (const auto& [path, bytes] : files) loads.back() += "|" + path + "=" + bytes;
    return load_status;
  }
  Status UnloadModel(std::string_view model, bool unload_dependents) override {
    unloads.push_back(std::string(model) + (unload_dependents ? "|dependents" : ""));
    return Status::Ok();
  }
  bool IsModelReady(std::string_view model, int64_t version) const override {
    return model == "ready" && (version == 0 || version == 3);
  }
  Result<std::shared_ptr<CustomMetricFamily>> MetricFamily(std::string_view name,
                                                           std::string_view description,
                                                           MetricKind kind) override {
    return registry.Family(name, description, kind);
  }

  bool throw_on_infer = false;
  std::vector<std::pair<Result<InferResponse>, bool>> answers;
  std::shared_ptr<InferRequest> seen;
  bool seen_decoupled = false;
  Status load_status = Status::Ok();
  std::vector<std::string> loads, unloads;
  runtime::CustomMetricsRegistry registry;
};

// What on_result received.
struct Received {
  std::vector<std::pair<VramdInferResult*, int32_t>> results;
  static void OnResult(void* context, VramdInferResult* result, int32_t final) {
    static_cast<Received*>(context)->results.push_back({result, final});
  }
};

class AbiServicesTest : public ::testing::Test {
 protected:
  const VramdServerApi& api() const { return *server_.table(); }
  void* server() const { return api().server; }

  void Release(Received& received) {
    for (auto& [result, final] : received.results) api().infer_result_release(server(), result);
    received.results.clear();
  }

  memory::Ledger ledger_;
  memory::Allocator allocator_{&ledger_};
  FakeServices services_;
  abi::ServerApi server_{"services_test", &allocator_, &services_};
};

VramdInferCall Call(const char* model) {
  VramdInferCall call{};
  call.struct_size = sizeof(VramdInferCall);
  call.model = model;
  return call;
}

TEST_F(AbiServicesTest, InferAsyncMakesTheRequestFromTheCall) {
  int32_t values[3] = {7, 8, 9};
  const int64_t shape[1] = {3};
  VramdTensor input{"INPUT0", VRAMD_TYPE_INT32, shape, 1, values, sizeof values};
  const char* wanted[1] = {"OUTPUT0"};
  VramdInferCall call = Call("target");
  call.version = 2;
  call.id = "req-1";
  call.inputs = &input;
  call.input_count = 1;
  call.requested_outputs = wanted;
  call.requested_output_count = 1;
  call.parameters_json = R"({"flag":true,"n":3,"s":"x"})";
  call.flags = VRAMD_REQUEST_FLAG_SEQUENCE_START;
  call.correlation_id = 42;
  call.timeout_us = 1500;
  call.decoupled = 1;

  Received received;
  VramdError error{};
  ASSERT_EQ(api().infer_async(server(), &call, &Received::OnResult, &received, &error), VRAMD_OK)
      << error.message;
  values[0] = -1;  // the inputs were copied before infer_async returned
  ASSERT_NE(services_.seen, nullptr);
  const InferRequest& r = *services_.seen;
  EXPECT_EQ(r.model_name, "target");
  EXPECT_EQ(r.model_version, 2);
  EXPECT_EQ(r.id, "req-1");
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_EQ(r.inputs[0].name, "INPUT0");
  EXPECT_EQ(r.inputs[0].datatype, DataType::kInt32);
  EXPECT_EQ(r.inputs[0].shape, (Shape{3}));
  int32_t copied[3];
  ASSERT_EQ(r.inputs[0].data.size(), sizeof copied);
  std::memcpy(copied, r.inputs[0].data.data(), sizeof copied);
  EXPECT_EQ(copied[0], 7);
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].name, "OUTPUT0");
  ASSERT_EQ(r.parameters.size(), 3u);
  EXPECT_EQ(r.parameters[0].name, "flag");
  EXPECT_EQ(std::get<bool>(r.parameters[0].value), true);
  EXPECT_EQ(r.flags, VRAMD_REQUEST_FLAG_SEQUENCE_START);
  EXPECT_EQ(r.correlation_id, 42u);
  EXPECT_TRUE(r.correlation_id_string.empty());
  EXPECT_EQ(r.timeout_us, 1500u);
  EXPECT_TRUE(services_.seen_decoupled);
  EXPECT_TRUE(received.results.empty()) << "the fake answered nothing";

  call.correlation_id_string = "seq-a";
  call.decoupled = 0;
  ASSERT_EQ(api().infer_async(server(), &call, &Received::OnResult, &received, &error), VRAMD_OK);
  EXPECT_EQ(services_.seen->correlation_id_string, "seq-a");
  EXPECT_FALSE(services_.seen_decoupled);
}

TEST_F(AbiServicesTest, InputsTheCallerKeepsAreReadInPlace) {
  int32_t values[2] = {5, 6};
  const int64_t shape[1] = {2};
  VramdTensor input{"INPUT0", VRAMD_TYPE_INT32, shape, 1, values, sizeof values};
  VramdInferCall call = Call("target");
  call.inputs = &input;
  call.input_count = 1;
  call.inputs_outlive_call = 1;
  Received received;
  VramdError error{};
  ASSERT_EQ(api().infer_async(server(), &call, &Received::OnResult, &received, &error), VRAMD_OK)
      << error.message;
  ASSERT_NE(services_.seen, nullptr);
  const Tensor& kept = services_.seen->inputs.at(0);
  EXPECT_EQ(static_cast<const void*>(kept.data.data()), static_cast<const void*>(values))
      << "no copy of an input the caller keeps";
  EXPECT_FALSE(kept.on_gpu());

  // A library's struct that ends before the field is read as 0: copied.
  call.struct_size = offsetof(VramdInferCall, inputs_outlive_call);
  ASSERT_EQ(api().infer_async(server(), &call, &Received::OnResult, &received, &error), VRAMD_OK);
  EXPECT_NE(static_cast<const void*>(services_.seen->inputs.at(0).data.data()),
            static_cast<const void*>(values));
}

TEST_F(AbiServicesTest, ThePreferredOutputMemoryBecomesTheRequestsOutputGpu) {
  VramdInferCall call = Call("target");
  Received received;
  VramdError error{};
  struct Case {
    VramdMemory preferred;
    int output_gpu;
  };
  for (const Case& c : {Case{{VRAMD_DEVICE_CPU, -1}, kOnHost},
                        Case{{VRAMD_DEVICE_GPU, -1}, kAnyGpu},
                        Case{{VRAMD_DEVICE_GPU, 1}, 1},
                        Case{{VRAMD_DEVICE_CUDA_HOST, 0}, kOnHost}}) {
    call.preferred_output_memory = c.preferred;
    ASSERT_EQ(api().infer_async(server(), &call, &Received::OnResult, &received, &error),
              VRAMD_OK);
    EXPECT_EQ(services_.seen->output_gpu, c.output_gpu)
        << "kind " << c.preferred.kind << " device " << c.preferred.device_id;
  }
}

TEST_F(AbiServicesTest, AGpuInputNeedsADeviceAndIsNeverReadAsHostMemory) {
  if (memory::CudaDeviceCount() > 0) GTEST_SKIP() << "checks the refusal on a machine without a GPU";
  float values[2] = {1, 2};
  const int64_t shape[1] = {2};
  VramdTensor input{"X", VRAMD_TYPE_FP32, shape, 1, values, sizeof values};
  VramdMemory on_gpu{VRAMD_DEVICE_GPU, 0};
  VramdInferCall call = Call("target");
  call.inputs = &input;
  call.input_memory = &on_gpu;
  call.input_count = 1;
  Received received;
  for (int32_t kept : {0, 1}) {
    call.inputs_outlive_call = kept;
    services_.seen = nullptr;
    VramdError error{};
    EXPECT_EQ(api().infer_async(server(), &call, &Received::OnResult, &received, &error),
              VRAMD_UNAVAILABLE);
    EXPECT_THAT(error.message, HasSubstr("input 'X'")) << "kept " << kept;
    EXPECT_EQ(services_.seen, nullptr) << "nothing ran";
  }
}

TEST_F(AbiServicesTest, EachResponseIsAResultTheBackendOwns) {
  InferResponse response;
  int64_t out[2] = {5, 6};
  response.outputs.push_back(Tensor{"OUT", DataType::kInt64, {2}, SharedBuffer::CopyOf(out, sizeof out)});
  response.parameters.push_back(InferParameter{"note", std::string("hi")});
  services_.answers.push_back({response, false});
  services_.answers.push_back({Status::Unavailable("queue full"), false});
  services_.answers.push_back({InferResponse{}, true});

  VramdInferCall call = Call("target");
  Received received;
  VramdError error{};
  ASSERT_EQ(api().infer_async(server(), &call, &Received::OnResult, &received, &error), VRAMD_OK);
  ASSERT_EQ(received.results.size(), 3u);
  EXPECT_EQ(received.results[0].second, 0);
  EXPECT_EQ(received.results[1].second, 0);
  EXPECT_EQ(received.results[2].second, 1);

  services_.answers.clear();  // the results must not depend on what made them
  VramdInferResult* first = received.results[0].first;
  const char* message = nullptr;
  EXPECT_EQ(api().infer_result_error(server(), first, &message), VRAMD_OK);
  ASSERT_EQ(api().infer_result_output_count(server(), first), 1u);
  VramdTensor tensor{};
  VramdMemory memory{VRAMD_DEVICE_GPU, 3};
  ASSERT_EQ(api().infer_result_output(server(), first, 0, &tensor, &memory, &error), VRAMD_OK);
  EXPECT_STREQ(tensor.name, "OUT");
  EXPECT_EQ(tensor.datatype, VRAMD_TYPE_INT64);
  ASSERT_EQ(tensor.rank, 1u);
  EXPECT_EQ(tensor.shape[0], 2);
  ASSERT_EQ(tensor.byte_size, sizeof out);
  EXPECT_EQ(static_cast<const int64_t*>(tensor.data)[1], 6);
  EXPECT_EQ(memory.kind, VRAMD_DEVICE_CPU);
  EXPECT_EQ(api().infer_result_output(server(), first, 1, &tensor, &memory, &error),
            VRAMD_NOT_FOUND);
  EXPECT_STREQ(api().infer_result_parameters(server(), first), R"({"note":"hi"})");

  VramdInferResult* failed = received.results[1].first;
  EXPECT_EQ(api().infer_result_error(server(), failed, &message), VRAMD_UNAVAILABLE);
  EXPECT_STREQ(message, "queue full");
  EXPECT_EQ(api().infer_result_output_count(server(), failed), 0u);
  EXPECT_STREQ(api().infer_result_parameters(server(), failed), "{}");
  Release(received);
}

TEST_F(AbiServicesTest, MalformedCallsAreRefusedAndNothingRuns) {
  Received received;
  VramdError error{};
  auto refuse = [&](const VramdInferCall* call, VramdCode code, const std::string& text) {
    services_.seen = nullptr;
    EXPECT_EQ(api().infer_async(server(), call, &Received::OnResult, &received, &error), code)
        << text;
    EXPECT_THAT(error.message, HasSubstr(text));
    EXPECT_EQ(services_.seen, nullptr);
  };
  refuse(nullptr, VRAMD_INVALID_ARGUMENT, "`call` is NULL");
  VramdInferCall call = Call(nullptr);
  refuse(&call, VRAMD_INVALID_ARGUMENT, "`model` is NULL");
  call = Call("m");
  call.struct_size = 8;
  refuse(&call, VRAMD_INVALID_ARGUMENT, "struct_size");

  int32_t value = 1;
  const int64_t shape[1] = {1};
  VramdTensor input{"IN", VRAMD_TYPE_INT32, shape, 1, &value, sizeof value};
  VramdMemory on_gpu{VRAMD_DEVICE_GPU, 0};
  call = Call("m");
  call.inputs = &input;
  call.input_count = 1;
  VramdMemory unknown_kind{VRAMD_DEVICE_CPU, 0};
  const int32_t seven = 7;  // as a library could write it, not loaded as the enum here
  std::memcpy(&unknown_kind.kind, &seven, sizeof seven);
  call.input_memory = &unknown_kind;
  refuse(&call, VRAMD_INVALID_ARGUMENT, "input 'IN': unknown memory kind 7");
  if (memory::CudaDeviceCount() == 0) {
    // A GPU input is copied to host; with no device the copy fails and names the input (with
    // one, the GPU check copies a torch tensor through BLS: tests/gpu/python_models).
    call.input_memory = &on_gpu;
    services_.seen = nullptr;
    EXPECT_NE(api().infer_async(server(), &call, &Received::OnResult, &received, &error), VRAMD_OK);
    EXPECT_THAT(error.message, HasSubstr("input 'IN'"));
    EXPECT_EQ(services_.seen, nullptr);
  }

  call.input_memory = nullptr;
  call.parameters_json = "[1]";
  refuse(&call, VRAMD_INVALID_ARGUMENT, "infer_async parameters");
  call.parameters_json = nullptr;
  input.datatype = static_cast<VramdDataType>(15);
  refuse(&call, VRAMD_INVALID_ARGUMENT, "unknown datatype 15");

  call = Call("m");
  EXPECT_EQ(api().infer_async(server(), &call, nullptr, &received, &error), VRAMD_INVALID_ARGUMENT);
  EXPECT_TRUE(received.results.empty());
}

TEST_F(AbiServicesTest, AnExceptionFromTheServicesIsTheCallsFinalResult) {
  services_.throw_on_infer = true;
  VramdInferCall call = Call("m");
  Received received;
  VramdError error{};
  EXPECT_EQ(api().infer_async(server(), &call, &Received::OnResult, &received, &error), VRAMD_OK);
  ASSERT_EQ(received.results.size(), 1u);
  EXPECT_EQ(received.results[0].second, 1);
  const char* message = nullptr;
  EXPECT_EQ(api().infer_result_error(server(), received.results[0].first, &message),
            VRAMD_INTERNAL);
  EXPECT_THAT(message, HasSubstr("fake services threw"));
  Release(received);
}

TEST_F(AbiServicesTest, NothingComesAfterTheFinalResult) {
  services_.answers.push_back({InferResponse{}, true});
  services_.answers.push_back({InferResponse{}, false});
  services_.answers.push_back({InferResponse{}, true});
  VramdInferCall call = Call("m");
  Received received;
  VramdError error{};
  ASSERT_EQ(api().infer_async(server(), &call, &Received::OnResult, &received, &error), VRAMD_OK);
  EXPECT_EQ(received.results.size(), 1u);
  Release(received);
}

TEST_F(AbiServicesTest, ACancelTokenCancelsTheCallsRequest) {
  services_.answers.push_back({InferResponse{}, true});  // ended before infer_async returns
  VramdInferCall call = Call("m");
  void* token = reinterpret_cast<void*>(1);  // overwritten
  call.cancel_token = &token;
  Received received;
  VramdError error{};
  ASSERT_EQ(api().infer_async(server(), &call, &Received::OnResult, &received, &error), VRAMD_OK);
  ASSERT_NE(token, nullptr);
  ASSERT_NE(services_.seen, nullptr);
  ASSERT_NE(services_.seen->cancel, nullptr);
  EXPECT_FALSE(services_.seen->cancel->cancelled());
  // After the final result too (a no-op for the model, which is done): the flag outlives the
  // request through the token.
  std::weak_ptr<CancelFlag> flag = services_.seen->cancel;
  services_.seen = nullptr;
  Release(received);
  api().infer_cancel(server(), token);
  api().infer_cancel(server(), token);
  ASSERT_FALSE(flag.expired());
  EXPECT_TRUE(flag.lock()->cancelled());
  api().infer_cancel_release(server(), token);
  EXPECT_TRUE(flag.expired());

  // A refused call stores NULL and makes no token; a call without the field (an older
  // library's shorter struct) gets none and is not cancellable.
  call = Call(nullptr);
  call.cancel_token = &token;
  EXPECT_EQ(api().infer_async(server(), &call, &Received::OnResult, &received, &error),
            VRAMD_INVALID_ARGUMENT);
  EXPECT_EQ(token, nullptr);
  call = Call("m");
  call.struct_size = offsetof(VramdInferCall, cancel_token);
  call.cancel_token = &token;  // beyond struct_size: not read
  token = reinterpret_cast<void*>(1);
  ASSERT_EQ(api().infer_async(server(), &call, &Received::OnResult, &received, &error), VRAMD_OK);
  EXPECT_EQ(token, reinterpret_cast<void*>(1));
  EXPECT_EQ(services_.seen->cancel, nullptr);
  Release(received);
}

TEST_F(AbiServicesTest, ModelControlRelaysTheServicesAnswers) {
  VramdError error{};
  EXPECT_EQ(api().load_model(server(), "a", nullptr, &error), VRAMD_OK);
  EXPECT_EQ(api().load_model(server(), "b", R"({"name":"b"})", &error), VRAMD_OK);
  EXPECT_EQ(services_.loads, (std::vector<std::string>{"a|", R"(b|{"name":"b"})"}));
  services_.load_status = Status::Unsupported("explicit model load / unload is not allowed");
  EXPECT_EQ(api().load_model(server(), "c", "", &error), VRAMD_UNSUPPORTED);
  EXPECT_STREQ(error.message, "explicit model load / unload is not allowed")
      << "the services' message passes unchanged";
  EXPECT_EQ(api().load_model(server(), nullptr, "", &error), VRAMD_INVALID_ARGUMENT);

  EXPECT_EQ(api().unload_model(server(), "a", 1, &error), VRAMD_OK);
  EXPECT_EQ(services_.unloads, (std::vector<std::string>{"a|dependents"}));

  EXPECT_EQ(api().is_model_ready(server(), "ready", 0), 1);
  EXPECT_EQ(api().is_model_ready(server(), "ready", 3), 1);
  EXPECT_EQ(api().is_model_ready(server(), "ready", 4), 0);
  EXPECT_EQ(api().is_model_ready(server(), nullptr, 0), 0);
}

TEST_F(AbiServicesTest, ModelFilesReachTheServicesCopied) {
  ASSERT_GT(api().struct_size, offsetof(VramdServerApi, load_model_files));
  VramdError error{};
  std::string weights("w\0x", 3);  // bytes, a NUL among them
  std::string source = "print()";
  std::vector<VramdModelFile> files = {{"1/model.py", source.data(), source.size()},
                                       {"1/w.bin", weights.data(), weights.size()},
                                       {"1/empty", nullptr, 0}};
  EXPECT_EQ(api().load_model_files(server(), "f", "{}", files.data(), files.size(), &error),
            VRAMD_OK);
  source.assign("changed");  // the services had their own copy
  ASSERT_EQ(services_.loads.size(), 1u);
  EXPECT_EQ(services_.loads[0], std::string("f|{}|1/model.py=print()|1/w.bin=w\0x|1/empty=", 44));
  EXPECT_EQ(api().load_model_files(server(), "f", "{}", nullptr, 1, &error),
            VRAMD_INVALID_ARGUMENT);
  EXPECT_THAT(error.message, HasSubstr("`files` is NULL"));
  VramdModelFile no_path{nullptr, "x", 1};
  EXPECT_EQ(api().load_model_files(server(), "f", "{}", &no_path, 1, &error),
            VRAMD_INVALID_ARGUMENT);
  EXPECT_THAT(error.message, HasSubstr("file 0 has a NULL path or data"));
  EXPECT_EQ(services_.loads.size(), 1u) << "refused calls reach no services";
}

TEST_F(AbiServicesTest, MetricsThroughTheTable) {
  VramdError error{};
  void* family = nullptr;
  ASSERT_EQ(api().metric_family_create(server(), "bls_calls", "Calls made.", 0, &family, &error),
            VRAMD_OK)
      << error.message;
  void* counter = nullptr;
  ASSERT_EQ(api().metric_create(server(), family, R"({"model":"m"})", nullptr, 0, &counter, &error),
            VRAMD_OK)
      << error.message;
  EXPECT_EQ(api().metric_update(server(), counter, 0, 2.5, &error), VRAMD_OK);
  double value = 0;
  ASSERT_EQ(api().metric_value(server(), counter, &value, &error), VRAMD_OK);
  EXPECT_EQ(value, 2.5);
  EXPECT_EQ(api().metric_update(server(), counter, 0, -1, &error), VRAMD_INVALID_ARGUMENT);
  EXPECT_STREQ(error.message,
               "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by "
               "non-negative values.");
  EXPECT_EQ(api().metric_update(server(), counter, 1, 1, &error), VRAMD_UNSUPPORTED);
  EXPECT_EQ(api().metric_update(server(), counter, 9, 1, &error), VRAMD_INVALID_ARGUMENT);
  EXPECT_THAT(services_.registry.PrometheusText(), HasSubstr("bls_calls{model=\"m\"} 2.5"));

  void* refused = nullptr;
  EXPECT_EQ(api().metric_create(server(), family, R"({"model":1})", nullptr, 0, &refused, &error),
            VRAMD_INVALID_ARGUMENT);
  EXPECT_STREQ(error.message,
               "Parameter [model] must have a type of TRITONSERVER_PARAMETER_STRING to be added "
               "as a label.");
  EXPECT_EQ(refused, nullptr);
  EXPECT_EQ(api().metric_family_create(server(), "bls_calls", "Calls made.", 1, &refused, &error),
            VRAMD_INVALID_ARGUMENT)
      << "a live family's name with another kind";
  EXPECT_EQ(api().metric_family_create(server(), "x", "", 5, &refused, &error),
            VRAMD_INVALID_ARGUMENT);

  void* histograms = nullptr;
  ASSERT_EQ(api().metric_family_create(server(), "bls_seconds", "", 2, &histograms, &error),
            VRAMD_OK);
  const double buckets[2] = {0.1, 1};
  void* histogram = nullptr;
  ASSERT_EQ(api().metric_create(server(), histograms, "", buckets, 2, &histogram, &error), VRAMD_OK)
      << error.message;
  EXPECT_EQ(api().metric_update(server(), histogram, 2, 0.5, &error), VRAMD_OK);
  EXPECT_EQ(api().metric_value(server(), histogram, &value, &error), VRAMD_UNSUPPORTED);
  EXPECT_THAT(services_.registry.PrometheusText(), HasSubstr("bls_seconds_bucket{le=\"1\"} 1"));

  // The family's handle may go first: the metric keeps it exported.
  api().metric_family_release(server(), family);
  EXPECT_THAT(services_.registry.PrometheusText(), HasSubstr("bls_calls{model=\"m\"} 2.5"));
  api().metric_release(server(), counter);
  EXPECT_THAT(services_.registry.PrometheusText(), ::testing::Not(HasSubstr("bls_calls")));
  api().metric_release(server(), histogram);
  api().metric_family_release(server(), histograms);
  EXPECT_EQ(services_.registry.PrometheusText(), "");
}

TEST(AbiServicesWithoutServicesTest, EveryEntryPointSaysTheServerGivesNone) {
  memory::Ledger ledger;
  memory::Allocator allocator{&ledger};
  abi::ServerApi server("no_services", &allocator);
  const VramdServerApi& api = *server.table();
  ASSERT_GE(api.struct_size, offsetof(VramdServerApi, metric_value) + sizeof(void*));
  VramdError error{};
  VramdInferCall call = Call("m");
  Received received;
  EXPECT_EQ(api.infer_async(api.server, &call, &Received::OnResult, &received, &error),
            VRAMD_UNSUPPORTED);
  EXPECT_THAT(error.message, HasSubstr("this server gives backends no calls into other models"));
  EXPECT_EQ(api.load_model(api.server, "m", "", &error), VRAMD_UNSUPPORTED);
  EXPECT_THAT(error.message, HasSubstr("this server gives backends no model control"));
  EXPECT_EQ(api.unload_model(api.server, "m", 0, &error), VRAMD_UNSUPPORTED);
  EXPECT_EQ(api.is_model_ready(api.server, "m", 0), 0);
  void* family = nullptr;
  EXPECT_EQ(api.metric_family_create(api.server, "m", "", 0, &family, &error), VRAMD_UNSUPPORTED);
  EXPECT_THAT(error.message, HasSubstr("this server gives backends no custom metrics"));
  EXPECT_EQ(family, nullptr);
  EXPECT_TRUE(received.results.empty());
}

}  // namespace
}  // namespace vramd::backends
