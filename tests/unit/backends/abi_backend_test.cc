// The C ABI bridge (backends/abi/): the built-in backends are reached through their
// VramdBackendApi tables like any library, their tables are checked as a library's are,
// record_load_phase reaches the load's LoadTiming (and only during a load), and an exception
// thrown inside an entry point made with the C++ kit (as every built-in's are) becomes an error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/abi/abi_backend.h"
#include "backends/abi/abi_bridge.h"
#include "backends/abi/backend_kit.h"
#include "backends/add_sub/add_sub_backend.h"
#include "backends/backend.h"
#include "backends/identity/identity_backend.h"
#include "backends/mlp/mlp_backend.h"
#include "core/load_timing.h"
#include "memory/allocator.h"
#include "memory/cuda_devices.h"
#include "memory/ledger.h"

namespace vramd::backends {
namespace {

using ::testing::HasSubstr;

TEST(AbiBuiltinsTest, EveryBuiltInIsItsTableBehindTheBridge) {
  const std::vector<std::pair<std::string, const VramdBackendApi*>> builtins = {
      {"identity", IdentityBackendApi()}, {"add_sub", AddSubBackendApi()}, {"mlp", MlpBackendApi()}};
  for (const auto& [name, table] : builtins) {
    config::ModelConfig config;
    config.set_name("m");
    config.set_backend(name);
    auto found = FindBackend(config);
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    auto* abi = dynamic_cast<AbiBackend*>(*found);
    ASSERT_NE(abi, nullptr) << name << " is not behind the C ABI";
    EXPECT_TRUE(abi->linked()) << name;
    EXPECT_EQ(abi->api(), table) << name;
    EXPECT_EQ(abi->api()->struct_size, sizeof(VramdBackendApi));
    EXPECT_EQ(abi->api()->abi_version, VRAMD_BACKEND_ABI_VERSION);
    EXPECT_STREQ(abi->api()->name, name.c_str());
    EXPECT_EQ(abi->SupportsGpu(), name == "mlp" && VRAMD_WITH_CUDA != 0) << name;
    EXPECT_EQ(abi->api()->execute_on_instance_threads, 0) << name;
    EXPECT_FALSE(abi->ExecutesOnInstanceThreads()) << name << " keeps the inline fast path";
  }
}

TEST(AbiBuiltinsTest, ExecuteOnInstanceThreadsIsReadOnlyWhereTheTableHasIt) {
  VramdBackendApi table = *IdentityBackendApi();
  table.execute_on_instance_threads = 1;
  auto declares = AbiBackend::Create(&table, "identity", std::nullopt);
  ASSERT_TRUE(declares.ok()) << declares.status().ToString();
  EXPECT_TRUE((*declares)->ExecutesOnInstanceThreads());

  // A library built before the field was appended: its table ends where the field begins, and
  // whatever lies past it (here a 1) is not the table's.
  table.struct_size = offsetof(VramdBackendApi, execute_on_instance_threads);
  auto older = AbiBackend::Create(&table, "identity", std::nullopt);
  ASSERT_TRUE(older.ok()) << "an older table must still load: " << older.status().ToString();
  EXPECT_FALSE((*older)->ExecutesOnInstanceThreads());

  // One that ends before execute lacks an entry point of version 1.
  table.struct_size = offsetof(VramdBackendApi, execute);
  auto small = AbiBackend::Create(&table, "identity", std::nullopt);
  ASSERT_FALSE(small.ok());
  EXPECT_THAT(small.status().message(), HasSubstr("needs at least"));
}

TEST(AbiBuiltinsTest, LinkedTablesAreCheckedAsLibrariesAre) {
  VramdBackendApi table = *IdentityBackendApi();
  table.abi_version = 42;
  auto old = AbiBackend::Create(&table, "identity", std::nullopt);
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(old.status().message(), HasSubstr("built-in backend 'identity'"));
  EXPECT_THAT(old.status().message(), HasSubstr("backend ABI version 42"));

  table = *IdentityBackendApi();
  table.execute = nullptr;
  auto incomplete = AbiBackend::Create(&table, "identity", std::nullopt);
  ASSERT_FALSE(incomplete.ok());
  EXPECT_THAT(incomplete.status().message(), HasSubstr("leaves an entry point NULL"));

  auto renamed = AbiBackend::Create(IdentityBackendApi(), "other", std::nullopt);
  ASSERT_FALSE(renamed.ok());
  EXPECT_THAT(renamed.status().message(), HasSubstr("calls itself 'identity'"));

  EXPECT_FALSE(AbiBackend::Create(nullptr, "none", std::nullopt).ok());
}

// ---- backends made with the C++ kit, for the tests below ------------------------------------

// Records phases through record_load_phase: at model_create, instance_create and execute.
class PhaseModel {
 public:
  class Instance {
   public:
    explicit Instance(const VramdServerApi* server) : server_(server) {}
    Status Execute(const VramdRequest&, const VramdOutputs&) {
      abi::RecordLoadPhase(server_, "during_execute", 1.0, 1);  // not a load: ignored
      return Status::Ok();
    }

   private:
    const VramdServerApi* const server_;
  };

  static Result<std::unique_ptr<PhaseModel>> Create(const VramdModelInfo& info) {
    abi::RecordLoadPhase(info.server, "file_read", 0.25, 100);
    abi::RecordLoadPhase(info.server, "file_read", 0.25, 28);  // accumulates
    return std::make_unique<PhaseModel>(info.server);
  }
  explicit PhaseModel(const VramdServerApi* server) : server_(server) {}
  Result<std::unique_ptr<Instance>> CreateInstance(const VramdInstanceInfo&) {
    abi::RecordLoadPhase(server_, "h2d", 0.5, 4096);
    return std::make_unique<Instance>(server_);
  }

 private:
  const VramdServerApi* const server_;
};

// Throws from every entry point it can: what config parameter "throw" names.
class ThrowingModel {
 public:
  class Instance {
   public:
    Status Execute(const VramdRequest&, const VramdOutputs&) {
      throw std::runtime_error("execute blew up");
    }
  };

  static Result<std::unique_ptr<ThrowingModel>> Create(const VramdModelInfo& info) {
    VRAMD_ASSIGN_OR_RETURN(config::ModelConfig config, abi::ModelConfigOf(info));
    if (config.parameters().contains("throw_in_create")) throw std::logic_error("create blew up");
    return std::make_unique<ThrowingModel>();
  }
  Result<std::unique_ptr<Instance>> CreateInstance(const VramdInstanceInfo& info) {
    if (info.index > 0) throw std::bad_alloc();
    return std::make_unique<Instance>();
  }
};

// Adds a 2 MiB host output through VramdOutputs::add and, when the request asks for a GPU, a
// GPU one through add_on_device (which needs a CUDA device); records what the request said.
class OutputsModel {
 public:
  class Instance {
   public:
    Status Execute(const VramdRequest& request, const VramdOutputs& outputs) {
      preferred = abi::PreferredOutputMemory(request);
      VRAMD_ASSIGN_OR_RETURN(std::byte * big, abi::AddOutput(outputs, "BIG", DataType::kUint8,
                                                             {kBig}, kBig));
      std::memset(big, 7, kBig);
      if (std::string_view(request.id) == "gpu") {
        VRAMD_RETURN_IF_ERROR(abi::AddOutputIn(outputs, {VRAMD_DEVICE_GPU, 0}, "ON_GPU",
                                               DataType::kUint8, {16}, 16)
                                  .status());
      }
      return Status::Ok();
    }
    static inline VramdMemory preferred{};
  };
  static constexpr int64_t kBig = 2 << 20;

  static Result<std::unique_ptr<OutputsModel>> Create(const VramdModelInfo&) {
    return std::make_unique<OutputsModel>();
  }
  Result<std::unique_ptr<Instance>> CreateInstance(const VramdInstanceInfo&) {
    return std::make_unique<Instance>();
  }
};

// Answers each input as output "OUT_<name>" through VramdOutputs::add_from_input; a request
// with id "out_of_range" asks for an input past the request's, "twice" adds one output twice.
class PassThroughModel {
 public:
  class Instance {
   public:
    Status Execute(const VramdRequest& request, const VramdOutputs& outputs) {
      const std::string_view id = request.id;
      if (id == "out_of_range") {
        VramdError error{};
        const VramdCode code = outputs.add_from_input(outputs.outputs, "OUT", request.input_count,
                                                      &error);
        return abi::FromVramd(code, error, "");
      }
      for (size_t i = 0; i < request.input_count; ++i) {
        const VramdTensor& in = request.inputs[i];
        const std::string name = std::string("OUT_") + in.name;
        VRAMD_RETURN_IF_ERROR(abi::AddFromInput(outputs, name, request, in));
        if (id == "twice") VRAMD_RETURN_IF_ERROR(abi::AddFromInput(outputs, name, request, in));
      }
      return Status::Ok();
    }
  };

  static Result<std::unique_ptr<PassThroughModel>> Create(const VramdModelInfo&) {
    return std::make_unique<PassThroughModel>();
  }
  Result<std::unique_ptr<Instance>> CreateInstance(const VramdInstanceInfo&) {
    return std::make_unique<Instance>();
  }
};

class AbiKitTest : public ::testing::Test {
 protected:
  template <typename Model>
  std::unique_ptr<AbiBackend> Make(const char* name) {
    auto backend = AbiBackend::Create(abi::BackendApiFor<Model>(name, false), name, std::nullopt);
    EXPECT_TRUE(backend.ok()) << backend.status().ToString();
    return backend.ok() ? std::move(backend).value() : nullptr;
  }

  ModelContext Context() {
    ModelContext ctx;
    ctx.name = config_.name();
    ctx.version = 1;
    ctx.config = &config_;
    ctx.allocator = &allocator_;
    ctx.timing = &timing_;
    return ctx;
  }

  uint64_t Bytes(std::string_view phase) const {
    for (const LoadPhase& p : timing_.phases()) {
      if (p.name == phase) return p.bytes;
    }
    return 0;
  }

  memory::Ledger ledger_;
  memory::Allocator allocator_{&ledger_};
  config::ModelConfig config_;
  LoadTiming timing_;
};

TEST_F(AbiKitTest, RecordLoadPhaseReachesTheLoadTimingOnlyDuringALoad) {
  config_.set_name("timed");
  auto backend = Make<PhaseModel>("phases");
  ASSERT_NE(backend, nullptr);
  auto model = backend->LoadModel(Context());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto instance = (*model)->CreateInstance(InstanceContext{"timed_0", 0, DeviceKind::kCpu, -1,
                                                           memory::kNoOwner, &timing_});
  ASSERT_TRUE(instance.ok()) << instance.status().ToString();
  std::vector<Tensor> outputs;
  ASSERT_TRUE((*instance)->Execute(InferRequest{}, &outputs).ok());

  const auto phases = timing_.phases();
  ASSERT_EQ(phases.size(), 2u);
  EXPECT_EQ(phases[0].name, "file_read");
  EXPECT_DOUBLE_EQ(phases[0].seconds, 0.5);
  EXPECT_EQ(phases[0].bytes, 128u);
  EXPECT_EQ(phases[1].name, "h2d");
  EXPECT_EQ(phases[1].bytes, 4096u);
  EXPECT_EQ(Bytes("during_execute"), 0u);
}

TEST_F(AbiKitTest, RecordLoadPhaseIsSkippedForAServerTableWithoutIt) {
  // A server built before the field was appended: its struct ends before it.
  struct Called {
    static void Fail(void*, const char* phase, double, uint64_t) {
      ADD_FAILURE() << "record_load_phase called past the table's end: " << phase;
    }
  };
  VramdServerApi older{};
  older.struct_size = offsetof(VramdServerApi, record_load_phase);
  older.record_load_phase = &Called::Fail;
  abi::RecordLoadPhase(&older, "file_read", 1.0, 1);
  abi::RecordLoadPhase(nullptr, "file_read", 1.0, 1);
}

TEST_F(AbiKitTest, MlpRecordsItsPhasesThroughTheAbi) {
  // The mlp's phases (file_read, host_stage, h2d) are covered with real weights in
  // mlp_backend_test and reload_faults_test; here, that a failed read still records its time.
  config_.set_name("mlp_missing");
  config_.set_backend("mlp");
  config_.set_max_batch_size(1);
  auto* in = config_.add_input();
  in->set_name("INPUT0");
  in->set_data_type(config::TYPE_FP32);
  in->add_dims(4);
  auto* out = config_.add_output();
  out->set_name("OUTPUT0");
  out->set_data_type(config::TYPE_FP32);
  out->add_dims(2);
  auto backend = FindBackend(config_);
  ASSERT_TRUE(backend.ok());
  ModelContext ctx = Context();
  ctx.version_dir = "/nonexistent/mlp_missing/1";
  auto model = (*backend)->LoadModel(ctx);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(model.status().message(), HasSubstr("model 'mlp_missing': weights"));
  ASSERT_EQ(timing_.phases().size(), 1u);
  EXPECT_EQ(timing_.phases()[0].name, "file_read");
}

TEST_F(AbiKitTest, ExceptionsInEntryPointsBecomeErrors) {
  auto backend = Make<ThrowingModel>("throwing");
  ASSERT_NE(backend, nullptr);

  config_.set_name("throws_in_create");
  (*config_.mutable_parameters())["throw_in_create"].set_string_value("1");
  auto failed = backend->LoadModel(Context());
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kInternal);
  EXPECT_EQ(failed.status().message(), "model_create: create blew up");

  config_.clear_parameters();
  auto model = backend->LoadModel(Context());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto no_memory = (*model)->CreateInstance(InstanceContext{"t_1", 1, DeviceKind::kCpu, -1});
  ASSERT_FALSE(no_memory.ok());
  EXPECT_EQ(no_memory.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(no_memory.status().message(), HasSubstr("instance_create: out of host memory"));

  auto instance = (*model)->CreateInstance(InstanceContext{"t_0", 0, DeviceKind::kCpu, -1});
  ASSERT_TRUE(instance.ok()) << instance.status().ToString();
  std::vector<Tensor> outputs;
  Status executed = (*instance)->Execute(InferRequest{}, &outputs);
  EXPECT_EQ(executed.code(), StatusCode::kInternal);
  EXPECT_EQ(executed.message(), "execute: execute blew up");
  EXPECT_TRUE(outputs.empty());
}

// A large host output comes from the CPU pool, charged to the request's owner until the
// response lets it go, unless the consumer gave memory for it, which the backend then writes;
// a GPU output without a device is an error naming it, not a crash; a backend that takes no
// GPU inputs is told its consumer takes host memory.
TEST_F(AbiKitTest, LargeHostOutputsArePooledOrWrittenWhereTheConsumerGaveMemory) {
  auto backend = Make<OutputsModel>("outputs");
  ASSERT_NE(backend, nullptr);
  config_.set_name("outputs");
  auto model = backend->LoadModel(Context());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto instance = (*model)->CreateInstance(InstanceContext{"o_0", 0, DeviceKind::kCpu, -1});
  ASSERT_TRUE(instance.ok()) << instance.status().ToString();

  const memory::OwnerId request_owner =
      ledger_.OpenOwner(memory::kNoOwner, memory::OwnerKind::kRequest, "r");
  std::vector<Tensor> outputs;
  InferRequest request;
  request.output_gpu = kAnyGpu;
  {
    memory::OwnerScope scope(request_owner);
    ASSERT_TRUE((*instance)->Execute(request, &outputs).ok());
  }
  EXPECT_EQ(OutputsModel::Instance::preferred.kind, VRAMD_DEVICE_CPU);
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].data.size(), static_cast<size_t>(OutputsModel::kBig));
  EXPECT_EQ(static_cast<int>(outputs[0].data.data()[OutputsModel::kBig - 1]), 7);
  EXPECT_EQ(ledger_.Stats(request_owner).value().live_bytes, OutputsModel::kBig);
  outputs.clear();
  EXPECT_EQ(ledger_.Stats(request_owner).value().live_bytes, 0);

  // Memory the consumer gave for the output (a client's shared memory): written there, and
  // charged to no one of the server's.
  std::vector<std::byte> given(OutputsModel::kBig);
  request.output_buffer = [&given](std::string_view name, size_t size) -> std::optional<OutputBuffer> {
    if (name != "BIG" || size != given.size()) return std::nullopt;
    return OutputBuffer{SharedBuffer::View(nullptr, given.data(), given.size()), kOnHost};
  };
  {
    memory::OwnerScope scope(request_owner);
    ASSERT_TRUE((*instance)->Execute(request, &outputs).ok());
  }
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].data.data(), given.data());
  EXPECT_EQ(static_cast<int>(given[OutputsModel::kBig - 1]), 7);
  EXPECT_EQ(ledger_.Stats(request_owner).value().live_bytes, 0);
  outputs.clear();
  request.output_buffer = nullptr;

  request.id = "gpu";
  {
    memory::OwnerScope scope(request_owner);
    Status gpu = (*instance)->Execute(request, &outputs);
    if (memory::CudaDeviceCount() == 0) {
      EXPECT_FALSE(gpu.ok());
      EXPECT_THAT(gpu.message(), HasSubstr("ON_GPU"));
      EXPECT_TRUE(outputs.empty()) << "a failed execute's partial outputs are not an answer";
    } else {
      EXPECT_TRUE(gpu.ok()) << gpu.ToString();
      ASSERT_EQ(outputs.size(), 2u);
      EXPECT_EQ(outputs[1].gpu, 0);
    }
  }
  outputs.clear();
  EXPECT_EQ(ledger_.Stats(request_owner).value().live_bytes, 0);
  ledger_.CloseOwner(request_owner);
}

TEST(AbiAllocationTest, FreesThroughTheServerAndChargesTheOwner) {
  memory::Ledger ledger;
  memory::Allocator allocator(&ledger);
  memory::ScopedOwner owner(&ledger, ledger.root(), memory::OwnerKind::kVersion, "1");
  abi::ServerApi server("kit", &allocator);
  {
    auto a = abi::Allocation::Make(server.table(), owner.id(), VRAMD_DEVICE_CPU, -1, 1024);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(ledger.Stats(owner.id())->live_bytes, 1024);
    abi::Allocation moved = std::move(a).value();
    EXPECT_EQ(moved.size(), 1024u);
    EXPECT_EQ(ledger.Stats(owner.id())->live_bytes, 1024);
  }
  EXPECT_EQ(ledger.Stats(owner.id())->live_bytes, 0);

  auto bad = abi::Allocation::Make(server.table(), owner.id(), VRAMD_DEVICE_GPU, -3, 16);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(AbiAllocationTest, RechargeMovesALiveAllocationToAnotherOwner) {
  memory::Ledger ledger;
  memory::Allocator allocator(&ledger);
  memory::ScopedOwner version(&ledger, ledger.root(), memory::OwnerKind::kVersion, "1");
  memory::ScopedOwner instance(&ledger, version.id(), memory::OwnerKind::kInstance, "m_0");
  abi::ServerApi server("kit", &allocator);
  const VramdServerApi* api = server.table();
  ASSERT_GT(api->struct_size, offsetof(VramdServerApi, recharge));
  void* ptr = nullptr;
  VramdError error{};
  ASSERT_EQ(api->allocate(api->server, instance.id(), VRAMD_DEVICE_CPU, -1, 4096, nullptr, &ptr,
                          &error),
            VRAMD_OK);
  EXPECT_EQ(api->recharge(api->server, ptr, version.id(), &error), VRAMD_OK);
  EXPECT_EQ(ledger.Stats(instance.id())->live_bytes, 0);
  EXPECT_EQ(ledger.Stats(version.id())->live_bytes, 4096);
  EXPECT_TRUE(instance.Close().empty());  // nothing of its own left: no leak

  int not_allocated = 0;
  EXPECT_EQ(api->recharge(api->server, &not_allocated, version.id(), &error), VRAMD_NOT_FOUND);
  EXPECT_NE(std::string(error.message).find("recharge"), std::string::npos) << error.message;

  api->free(api->server, VRAMD_DEVICE_CPU, -1, ptr);
  EXPECT_EQ(ledger.Stats(version.id())->live_bytes, 0);
}

Tensor Int32Input(std::string name, std::vector<int32_t> values, bool lent,
                  std::vector<int32_t>* lender) {
  Tensor t{std::move(name), DataType::kInt32, {static_cast<int64_t>(values.size())}, {}};
  const size_t bytes = values.size() * sizeof(int32_t);
  if (lent) {
    *lender = std::move(values);
    t.data = SharedBuffer::View(nullptr, reinterpret_cast<const std::byte*>(lender->data()), bytes);
  } else {
    t.data = SharedBuffer::CopyOf(values.data(), bytes);
  }
  return t;
}

std::vector<int32_t> Int32s(const Tensor& t) {
  std::vector<int32_t> v(t.data.size() / sizeof(int32_t));
  std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

// An input answered unchanged is the input's own memory, kept by the answer after the request
// is gone; one whose memory is only lent for the call (a BLS caller's) is copied, into memory
// the consumer gave where it gave some; a bad index or a name added twice is an error, not a
// crash; and a server table without add_from_input gets the kit's copy.
TEST_F(AbiKitTest, AnInputAnsweredUnchangedIsItsOwnMemoryUnlessLent) {
  auto backend = Make<PassThroughModel>("pass_through");
  ASSERT_NE(backend, nullptr);
  config_.set_name("pass_through");
  auto model = backend->LoadModel(Context());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto instance = (*model)->CreateInstance(InstanceContext{"p_0", 0, DeviceKind::kCpu, -1});
  ASSERT_TRUE(instance.ok()) << instance.status().ToString();

  std::vector<int32_t> lender;
  std::vector<Tensor> outputs;
  const std::byte* owned_bytes = nullptr;
  {
    InferRequest request;
    request.inputs.push_back(Int32Input("A", {1, 2, 3}, /*lent=*/false, nullptr));
    request.inputs.push_back(Int32Input("B", {4, 5}, /*lent=*/true, &lender));
    owned_bytes = request.inputs[0].data.data();
    ASSERT_TRUE((*instance)->Execute(request, &outputs).ok());
  }
  lender.assign(lender.size(), -1);  // the caller reuses what it lent
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_EQ(outputs[0].name, "OUT_A");
  EXPECT_EQ(outputs[0].datatype, DataType::kInt32);
  EXPECT_EQ(outputs[0].shape, Shape({3}));
  EXPECT_EQ(outputs[0].data.data(), owned_bytes) << "no copy of an input the request owns";
  EXPECT_EQ(Int32s(outputs[0]), std::vector<int32_t>({1, 2, 3}));
  EXPECT_EQ(outputs[1].name, "OUT_B");
  EXPECT_NE(outputs[1].data.data(), reinterpret_cast<const std::byte*>(lender.data()));
  EXPECT_EQ(Int32s(outputs[1]), std::vector<int32_t>({4, 5}));
  outputs.clear();

  // A lent input whose output the consumer gave memory for is copied there.
  std::vector<int32_t> given(2, 0);
  InferRequest placed;
  placed.inputs.push_back(Int32Input("B", {6, 7}, /*lent=*/true, &lender));
  placed.output_buffer = [&given](std::string_view name, size_t size) -> std::optional<OutputBuffer> {
    if (name != "OUT_B" || size != given.size() * sizeof(int32_t)) return std::nullopt;
    return OutputBuffer{SharedBuffer::View(nullptr, reinterpret_cast<std::byte*>(given.data()), size),
                        kOnHost};
  };
  ASSERT_TRUE((*instance)->Execute(placed, &outputs).ok());
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0].data.data(), reinterpret_cast<const std::byte*>(given.data()));
  EXPECT_EQ(given, std::vector<int32_t>({6, 7}));
  outputs.clear();

  InferRequest bad;
  bad.inputs.push_back(Int32Input("A", {1}, false, nullptr));
  bad.id = "out_of_range";
  Status out_of_range = (*instance)->Execute(bad, &outputs);
  EXPECT_EQ(out_of_range.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(out_of_range.message(),
              HasSubstr("outputs->add_from_input 'OUT': input_index 1 but the request has 1 input(s)"));
  bad.id = "twice";
  Status twice = (*instance)->Execute(bad, &outputs);
  EXPECT_EQ(twice.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(twice.message(), HasSubstr("'OUT_A': added twice"));
  EXPECT_TRUE(outputs.empty());
}

TEST_F(AbiKitTest, AServerWithoutAddFromInputGetsACopyOfTheInput) {
  struct Sink {
    static VramdCode Add(void* sink, const char*, VramdDataType, const int64_t*, size_t,
                         size_t byte_size, void** data, VramdError*) {
      auto* bytes = static_cast<std::vector<std::byte>*>(sink);
      bytes->resize(byte_size);
      *data = bytes->data();
      return VRAMD_OK;
    }
  };
  std::vector<std::byte> written;
  VramdOutputs older{};
  older.struct_size = offsetof(VramdOutputs, add_from_input);
  older.outputs = &written;
  older.add = &Sink::Add;
  const int32_t values[2] = {11, 12};
  const int64_t shape[1] = {2};
  VramdTensor input{"A", VRAMD_TYPE_INT32, shape, 1, values, sizeof values};
  VramdRequest request{};
  request.struct_size = sizeof request;
  request.inputs = &input;
  request.input_count = 1;
  ASSERT_TRUE(abi::AddFromInput(older, "OUT_A", request, input).ok());
  ASSERT_EQ(written.size(), sizeof values);
  EXPECT_EQ(std::memcmp(written.data(), values, sizeof values), 0);
}

}  // namespace
}  // namespace vramd::backends
