// The backend ABI's request-list interface end to end through the runtime: a C table whose
// execute_requests answers each request through VramdServerApi::respond (one response, an
// error, several for a decoupled model, later from another thread), dynamic batching handing
// it several requests unjoined, Triton's response rules enforced, a failed call answering
// what the backend had not, and where tensors are: a request says where its consumer takes
// outputs, a GPU input reaches only a backend that takes GPU inputs (the others get it in host
// memory), a GPU output needs the device.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/abi/abi_backend.h"
#include "backends/backend.h"
#include "memory/cuda_devices.h"
#include "runtime/model_manager.h"
#include "support/config_text.h"
#include "support/manager_fixture.h"
#include "vramd/backend.h"

namespace vramd {
namespace {

using ::testing::HasSubstr;

// ---- a backend behind the C ABI -------------------------------------------------------------

struct ListModel {
  const VramdServerApi* server = nullptr;
};
struct ListInstance {
  ListModel* model = nullptr;
};

std::mutex g_mu;
std::vector<size_t> g_list_sizes;       // one entry per execute_requests call
std::vector<std::string> g_refusals;    // respond's messages for refused calls
std::vector<std::thread> g_later;       // threads answering after the call returned
std::vector<std::string> g_parameters;  // parameters_json as received
std::vector<VramdMemory> g_preferred;   // preferred_output_memory as received
std::vector<std::pair<VramdMemory, const void*>> g_inputs;  // input_memory[0], inputs[0].data

VramdCode ModelCreate(const VramdModelInfo* info, void** model, VramdError*) {
  auto* m = new ListModel;  // freed by ModelDestroy: the C side holds it
  m->server = info->server;
  *model = m;
  return VRAMD_OK;
}
void ModelDestroy(void* model) { delete static_cast<ListModel*>(model); }
VramdCode InstanceCreate(void* model, const VramdInstanceInfo*, void** instance, VramdError*) {
  *instance = new ListInstance{static_cast<ListModel*>(model)};
  return VRAMD_OK;
}
void InstanceDestroy(void* instance) { delete static_cast<ListInstance*>(instance); }
VramdCode Execute(void*, const VramdRequest*, const VramdOutputs*, VramdError* error) {
  std::snprintf(error->message, sizeof error->message, "execute must not be called");
  return VRAMD_INTERNAL;
}

// OUTPUT0 = INPUT0 + `add`, as a response (not sent).
VramdResponse* Echo(const VramdServerApi* s, const VramdRequest* r, int32_t add) {
  VramdResponse* response = nullptr;
  VramdError error{};
  if (s->response_create(s->server, r->responder, &response, &error) != VRAMD_OK) return nullptr;
  const VramdTensor& in = r->inputs[0];
  void* data = nullptr;
  if (s->response_add_output(s->server, response, "OUTPUT0", in.datatype, in.shape, in.rank,
                             in.byte_size, VRAMD_DEVICE_CPU, -1, &data, &error) != VRAMD_OK) {
    s->response_delete(s->server, response);
    return nullptr;
  }
  const auto* src = static_cast<const int32_t*>(in.data);
  auto* dst = static_cast<int32_t*>(data);
  for (size_t i = 0; i < in.byte_size / sizeof(int32_t); ++i) dst[i] = src[i] + add;
  return response;
}

void Refused(const VramdServerApi* s, VramdResponder* responder, VramdResponse* response,
             VramdCode code, const char* message, uint32_t flags) {
  VramdError error{};
  const VramdCode got = s->respond(s->server, responder, response, code, message, flags, &error);
  std::lock_guard lock(g_mu);
  g_refusals.push_back(got == VRAMD_OK ? std::string("(accepted)") : std::string(error.message));
}

VramdCode ExecuteRequests(void* instance, VramdRequest* const* requests, size_t count,
                          VramdError* error) {
  const VramdServerApi* s = static_cast<ListInstance*>(instance)->model->server;
  {
    std::lock_guard lock(g_mu);
    g_list_sizes.push_back(count);
  }
  for (size_t i = 0; i < count; ++i) {
    const VramdRequest* r = requests[i];
    const std::string id = r->id;
    VramdError e{};
    {
      std::lock_guard lock(g_mu);
      g_parameters.push_back(std::string(r->parameters_json, r->parameters_json_size));
      g_preferred.push_back(r->preferred_output_memory);
      g_inputs.emplace_back(r->input_memory[0], r->inputs[0].data);
    }
    if (r->input_memory[0].kind == VRAMD_DEVICE_GPU) {
      // Bytes on a GPU are not read here: the test checks where they came.
      s->respond(s->server, r->responder, nullptr, VRAMD_INVALID_ARGUMENT, "input on a GPU",
                 VRAMD_RESPONSE_FLAG_FINAL, &e);
      continue;
    }
    if (id.rfind("gpuout", 0) == 0) {
      // The server's answer to an output on GPU 0, passed on as the request's error.
      VramdResponse* response = nullptr;
      s->response_create(s->server, r->responder, &response, &e);
      void* data = nullptr;
      const VramdCode added = s->response_add_output(
          s->server, response, "OUTPUT0", VRAMD_TYPE_INT32, r->inputs[0].shape,
          r->inputs[0].rank, r->inputs[0].byte_size, VRAMD_DEVICE_GPU, 0, &data, &e);
      s->response_delete(s->server, response);
      s->respond(s->server, r->responder, nullptr, added, e.message, VRAMD_RESPONSE_FLAG_FINAL,
                 &e);
      continue;
    }
    if (id.rfind("fail", 0) == 0) {
      std::snprintf(error->message, sizeof error->message, "injected execute failure");
      return VRAMD_UNAVAILABLE;
    }
    if (id.rfind("err", 0) == 0) {
      s->respond(s->server, r->responder, nullptr, VRAMD_ALREADY_EXISTS, "model says no",
                 VRAMD_RESPONSE_FLAG_FINAL, &e);
    } else if (id.rfind("twice", 0) == 0) {
      s->respond(s->server, r->responder, Echo(s, r, 1), VRAMD_OK, nullptr, 0, &e);
      Refused(s, r->responder, Echo(s, r, 2), VRAMD_OK, nullptr, 0);
      s->respond(s->server, r->responder, nullptr, VRAMD_OK, nullptr, VRAMD_RESPONSE_FLAG_FINAL,
                 &e);
    } else if (id.rfind("finalfirst", 0) == 0) {
      Refused(s, r->responder, nullptr, VRAMD_OK, nullptr, VRAMD_RESPONSE_FLAG_FINAL);
      s->respond(s->server, r->responder, Echo(s, r, 0), VRAMD_OK, nullptr,
                 VRAMD_RESPONSE_FLAG_FINAL, &e);
    } else if (id.rfind("stream", 0) == 0) {
      for (int k = 1; k <= 3; ++k)
        s->respond(s->server, r->responder, Echo(s, r, k), VRAMD_OK, nullptr, 0, &e);
      s->respond(s->server, r->responder, nullptr, VRAMD_OK, nullptr, VRAMD_RESPONSE_FLAG_FINAL,
                 &e);
    } else if (id.rfind("later", 0) == 0) {
      VramdResponder* responder = r->responder;
      // The request's tensors die with the call: copy what the answer needs.
      const int32_t first = static_cast<const int32_t*>(r->inputs[0].data)[0];
      std::lock_guard lock(g_mu);
      g_later.emplace_back([s, responder, first] {
        VramdResponse* response = nullptr;
        VramdError le{};
        s->response_create(s->server, responder, &response, &le);
        const int64_t shape[1] = {1};
        void* data = nullptr;
        s->response_add_output(s->server, response, "OUTPUT0", VRAMD_TYPE_INT32, shape, 1, 4,
                               VRAMD_DEVICE_CPU, -1, &data, &le);
        std::memcpy(data, &first, 4);
        s->respond(s->server, responder, response, VRAMD_OK, nullptr, VRAMD_RESPONSE_FLAG_FINAL,
                   &le);
      });
    } else {
      s->respond(s->server, r->responder, Echo(s, r, 0), VRAMD_OK, nullptr,
                 VRAMD_RESPONSE_FLAG_FINAL, &e);
    }
  }
  return VRAMD_OK;
}

const VramdBackendApi* ListApi() {
  static const VramdBackendApi api = [] {
    VramdBackendApi a{};
    a.struct_size = sizeof(VramdBackendApi);
    a.abi_version = VRAMD_BACKEND_ABI_VERSION;
    a.name = "list_test";
    a.model_create = &ModelCreate;
    a.model_destroy = &ModelDestroy;
    a.instance_create = &InstanceCreate;
    a.instance_destroy = &InstanceDestroy;
    a.execute = &Execute;
    a.execute_on_instance_threads = 1;
    a.execute_requests = &ExecuteRequests;
    return a;
  }();
  return &api;
}

// The same backend, taking GPU inputs where they are.
const VramdBackendApi* GpuListApi() {
  static const VramdBackendApi api = [] {
    VramdBackendApi a = *ListApi();
    a.name = "list_gpu_test";
    a.accepts_gpu_inputs = 1;
    return a;
  }();
  return &api;
}

backends::Backend* TheBackend() {
  static auto backend = backends::AbiBackend::Create(ListApi(), "list_test", std::nullopt);
  static bool registered = backend.ok() && backends::RegisterBackend(backend->get()).ok();
  static auto gpu = backends::AbiBackend::Create(GpuListApi(), "list_gpu_test", std::nullopt);
  static bool gpu_registered = gpu.ok() && backends::RegisterBackend(gpu->get()).ok();
  EXPECT_TRUE(registered && gpu_registered);
  return backend->get();
}

// Int32Request whose INPUT0 says it is on GPU 0 (its bytes are host memory: nothing may read
// them as GPU memory on a machine without one, which the tests check).
InferRequest GpuInt32Request(std::string id) {
  InferRequest r = testing::Int32Request(std::move(id));
  r.inputs[0].gpu = 0;
  return r;
}

// ---- the tests --------------------------------------------------------------------------------

struct Answer {
  Result<runtime::InferOutcome> outcome{Status::Internal("unanswered")};
  std::vector<Result<InferResponse>> streamed;
};

std::vector<int32_t> Ints(const Tensor& t) {
  std::vector<int32_t> v(t.data.size() / 4);
  std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

class RequestListsTest : public testing::ManagerTest {
 protected:
  void SetUp() override {
    TheBackend();
    std::lock_guard lock(g_mu);
    g_list_sizes.clear();
    g_refusals.clear();
    g_parameters.clear();
    g_preferred.clear();
    g_inputs.clear();
  }
  void TearDown() override {
    std::vector<std::thread> later;
    {
      std::lock_guard lock(g_mu);
      later.swap(g_later);
    }
    for (auto& t : later) t.join();
  }

  std::unique_ptr<runtime::ModelManager> Start(const std::string& extra,
                                               const std::string& backend = "list_test") {
    WriteModel("m", testing::Int32ModelConfig(backend, 1, extra));
    return StartManager(ManagerOptions());
  }

  // Runs `request` on model m and waits for its answer (and, with `stream`, its responses).
  Answer Run(runtime::ModelManager& manager, InferRequest request, bool stream = false) {
    auto model = manager.Find("m", 0);
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    auto answer = std::make_shared<Answer>();
    if (stream) {
      request.stream = [answer](Result<InferResponse> r) { answer->streamed.push_back(std::move(r)); };
    }
    std::promise<void> done;
    (*model)->InferAsync(std::make_shared<InferRequest>(std::move(request)),
                         [answer, &done](Result<runtime::InferOutcome> outcome) {
                           answer->outcome = std::move(outcome);
                           done.set_value();
                         });
    done.get_future().wait();
    return std::move(*answer);
  }
};

TEST_F(RequestListsTest, EachRequestGetsItsOwnResponseOrError) {
  auto manager = Start("");
  Answer ok = Run(*manager, testing::Int32Request("ok-1"));
  ASSERT_TRUE(ok.outcome.ok()) << ok.outcome.status().ToString();
  ASSERT_EQ(ok.outcome->response.outputs.size(), 1u);
  EXPECT_EQ(Ints(ok.outcome->response.outputs[0]), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(ok.outcome->response.id, "ok-1");

  Answer err = Run(*manager, testing::Int32Request("err-1"));
  ASSERT_FALSE(err.outcome.ok());
  // The model's own code and text, in the model's context.
  EXPECT_EQ(err.outcome.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(err.outcome.status().message(), "model 'm' version 1: model says no");
}

TEST_F(RequestListsTest, RequestParametersReachTheBackendAsJson) {
  auto manager = Start("");
  InferRequest r = testing::Int32Request("ok-p");
  r.parameters.push_back({"temperature", 0.5});
  r.parameters.push_back({"name", std::string("x\"y")});
  r.parameters.push_back({"n", int64_t{-3}});
  r.parameters.push_back({"flag", true});
  ASSERT_TRUE(Run(*manager, std::move(r)).outcome.ok());
  std::lock_guard lock(g_mu);
  ASSERT_EQ(g_parameters.size(), 1u);
  EXPECT_EQ(g_parameters[0], R"({"temperature":0.5,"name":"x\"y","n":-3,"flag":true})");
}

TEST_F(RequestListsTest, DynamicBatchingHandsSeveralRequestsUnjoined) {
  auto manager = Start(
      "max_batch_size: 8\n"
      "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 2000000 }\n");
  auto model = manager->Find("m", 0);
  ASSERT_TRUE(model.ok());
  std::vector<std::promise<Result<runtime::InferOutcome>>> answers(4);
  for (int i = 0; i < 4; ++i) {
    InferRequest r;
    r.id = "ok-" + std::to_string(i);
    // Shapes the batcher can batch (as Triton's, it batches only requests of equal shapes
    // beyond dimension 0); each request still arrives as its own [1, 2].
    std::vector<int32_t> v(2, i * 10);
    r.inputs.push_back(Tensor{"INPUT0", DataType::kInt32, {1, static_cast<int64_t>(v.size())},
                              SharedBuffer::CopyOf(v.data(), v.size() * 4)});
    (*model)->InferAsync(std::make_shared<InferRequest>(std::move(r)),
                         [&answers, i](Result<runtime::InferOutcome> o) {
                           answers[i].set_value(std::move(o));
                         });
  }
  for (int i = 0; i < 4; ++i) {
    auto o = answers[i].get_future().get();
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    EXPECT_EQ(o->response.id, "ok-" + std::to_string(i));
    EXPECT_EQ(Ints(o->response.outputs[0]), std::vector<int32_t>(2, i * 10));
    EXPECT_EQ(o->response.outputs[0].shape, (Shape{1, 2}));
  }
  std::lock_guard lock(g_mu);
  size_t total = 0;
  for (size_t n : g_list_sizes) total += n;
  EXPECT_EQ(total, 4u);
  EXPECT_EQ(g_list_sizes, std::vector<size_t>{4}) << "one call with the preferred batch";
}

TEST_F(RequestListsTest, NotDecoupledSendsExactlyOneResponse) {
  auto manager = Start("");
  Answer twice = Run(*manager, testing::Int32Request("twice-1"));
  ASSERT_TRUE(twice.outcome.ok()) << twice.outcome.status().ToString();
  EXPECT_EQ(Ints(twice.outcome->response.outputs[0]), (std::vector<int32_t>{2, 3}))
      << "the first response is the answer";
  Answer first = Run(*manager, testing::Int32Request("finalfirst-1"));
  ASSERT_TRUE(first.outcome.ok()) << first.outcome.status().ToString();
  std::lock_guard lock(g_mu);
  ASSERT_EQ(g_refusals.size(), 2u);
  EXPECT_THAT(g_refusals[0], HasSubstr("sends exactly one response per request"));
  EXPECT_EQ(g_refusals[1],
            "Non-decoupled model cannot send complete final before sending a response");
}

TEST_F(RequestListsTest, DecoupledResponsesReachTheStreamThenTheFinalFlag) {
  auto manager = Start("model_transaction_policy { decoupled: true }\n");
  Answer a = Run(*manager, testing::Int32Request("stream-1"), /*stream=*/true);
  ASSERT_TRUE(a.outcome.ok()) << a.outcome.status().ToString();
  EXPECT_TRUE(a.outcome->response.outputs.empty());
  ASSERT_EQ(a.streamed.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    ASSERT_TRUE(a.streamed[k].ok());
    EXPECT_EQ(Ints(a.streamed[k]->outputs[0]), (std::vector<int32_t>{2 + k, 3 + k}));
  }
  // Without a stream, the request takes one response: a second fails it, saying how to get
  // them all.
  Answer one = Run(*manager, testing::Int32Request("stream-2"));
  ASSERT_FALSE(one.outcome.ok());
  EXPECT_THAT(one.outcome.status().message(), HasSubstr("use generate_stream"));
}

TEST_F(RequestListsTest, AResponseMayComeAfterTheCallFromAnotherThread) {
  auto manager = Start("model_transaction_policy { decoupled: true }\n");
  Answer a = Run(*manager, testing::Int32Request("later-1"));
  ASSERT_TRUE(a.outcome.ok()) << a.outcome.status().ToString();
  EXPECT_EQ(Ints(a.outcome->response.outputs[0]), (std::vector<int32_t>{1}));
}

TEST_F(RequestListsTest, AFailedCallAnswersWhatTheBackendHadNot) {
  auto manager = Start("");
  Answer a = Run(*manager, testing::Int32Request("fail-1"));
  ASSERT_FALSE(a.outcome.ok());
  EXPECT_EQ(a.outcome.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(a.outcome.status().message(), HasSubstr("model 'm' version 1"));
  EXPECT_THAT(a.outcome.status().message(), HasSubstr("injected execute failure"));
  // The instance still serves.
  EXPECT_TRUE(Run(*manager, testing::Int32Request("ok-after")).outcome.ok());
}

TEST_F(RequestListsTest, ARequestTellsTheBackendWhereItsConsumerTakesOutputs) {
  auto manager = Start("");
  InferRequest front_end = testing::Int32Request("ok-host");
  InferRequest any_gpu = testing::Int32Request("ok-any");
  any_gpu.output_gpu = kAnyGpu;
  InferRequest gpu1 = testing::Int32Request("ok-gpu1");
  gpu1.output_gpu = 1;
  for (InferRequest* r : {&front_end, &any_gpu, &gpu1}) {
    ASSERT_TRUE(Run(*manager, std::move(*r)).outcome.ok());
  }
  std::lock_guard lock(g_mu);
  ASSERT_EQ(g_preferred.size(), 3u);
  EXPECT_EQ(g_preferred[0].kind, VRAMD_DEVICE_CPU);
  EXPECT_EQ(g_preferred[1].kind, VRAMD_DEVICE_GPU);
  EXPECT_EQ(g_preferred[1].device_id, -1);
  EXPECT_EQ(g_preferred[2].kind, VRAMD_DEVICE_GPU);
  EXPECT_EQ(g_preferred[2].device_id, 1);
  EXPECT_EQ(g_inputs[0].first.kind, VRAMD_DEVICE_CPU) << "a front end's inputs are host memory";
}

TEST_F(RequestListsTest, AGpuInputReachesOnlyABackendThatTakesGpuInputs) {
  if (memory::CudaDeviceCount() > 0) GTEST_SKIP() << "fakes a GPU input on a machine without one";
  // A backend that takes GPU inputs gets the input where it is, the bytes untouched.
  auto gpu_manager = Start("", "list_gpu_test");
  InferRequest r = GpuInt32Request("ok-gpuin");
  const void* bytes = r.inputs[0].data.data();
  Answer taken = Run(*gpu_manager, std::move(r));
  ASSERT_FALSE(taken.outcome.ok());
  EXPECT_THAT(taken.outcome.status().message(), HasSubstr("input on a GPU"));
  {
    std::lock_guard lock(g_mu);
    ASSERT_EQ(g_inputs.size(), 1u);
    EXPECT_EQ(g_inputs[0].first.kind, VRAMD_DEVICE_GPU);
    EXPECT_EQ(g_inputs[0].first.device_id, 0);
    EXPECT_EQ(g_inputs[0].second, bytes) << "no copy";
    g_inputs.clear();
  }
  gpu_manager.reset();
  // One that reads host memory never sees it: the runtime moves it to host first, which needs
  // the device, so here the request fails naming the tensor and the backend is not called.
  auto manager = Start("");
  Answer moved = Run(*manager, GpuInt32Request("ok-gpuin-2"));
  ASSERT_FALSE(moved.outcome.ok());
  EXPECT_THAT(moved.outcome.status().message(), HasSubstr("tensor 'INPUT0' on cuda:0"));
  std::lock_guard lock(g_mu);
  EXPECT_TRUE(g_inputs.empty()) << "the backend was not called";
}

TEST_F(RequestListsTest, AGpuOutputNeedsTheDevice) {
  if (memory::CudaDeviceCount() > 0) GTEST_SKIP() << "checks the refusal without a GPU";
  auto manager = Start("");
  Answer a = Run(*manager, testing::Int32Request("gpuout-1"));
  ASSERT_FALSE(a.outcome.ok());
  EXPECT_THAT(a.outcome.status().message(), HasSubstr("response_add_output 'OUTPUT0' on GPU 0"));
  EXPECT_TRUE(Run(*manager, testing::Int32Request("ok-after")).outcome.ok());
}

TEST_F(RequestListsTest, ADecoupledConfigNeedsABackendThatTakesRequestLists) {
  WriteModel("d", testing::Int32ModelConfig("identity", 1,
                                             "model_transaction_policy { decoupled: true }\n"));
  auto o = ManagerOptions();
  o.model_control_mode = runtime::ModelControlMode::kExplicit;
  auto manager = StartManager(o);
  ASSERT_NE(manager, nullptr);
  Status loaded = manager->Load("d");
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(loaded.message(), HasSubstr("model_transaction_policy.decoupled is set"));
  EXPECT_THAT(loaded.message(), HasSubstr("backend 'identity'"));
}

}  // namespace
}  // namespace vramd
