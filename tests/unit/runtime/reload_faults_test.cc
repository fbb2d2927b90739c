// Faults during a reload while a version serves, under a light concurrent load (client threads
// sending requests back to back the way the HTTP front end does, every answer checked against
// the serving version's reference output):
//   (a) the new version's weights file is corrupt (truncated, garbage, empty, wrong shapes);
//   (b) the backend fails in LoadModel, or in CreateInstance, after allocating;
//   (c) the k-th allocation of the load fails, for every k of the load's N allocations;
//   (d) poll mode: a version folder still being written is not loaded until two polls agree,
//       and a corrupt one that settles fails to load without disturbing the serving version;
//   (e) config.pbtxt has a syntax error (explicit Load and poll mode);
// and a first load that fails (nothing serving) shows the model failed, and a good load then
// recovers it.
//
// Each time: the load fails with an error naming its cause (the file, file:line, the instance),
// the serving version answers on, unchanged; the index shows it READY with "serving; last load
// failed: <the error>", as does the lifecycle; and the ledger is exactly as before the attempt:
// same live bytes and allocations, same owner tree (the failed attempt's owners closed and
// gone), no leak report.
//
// The serving versions here have one instance each: the race of a drain between two instances
// (and the scheduler bug it found) is reload_under_load_test's business; attempts that must
// fail part-way through their instances have two.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/mlp/safetensors_writer.h"
#include "runtime/model_manager.h"
#include "support/mlp_reference.h"
#include "support/reload_harness.h"
#include "support/scratch_repository.h"

namespace vramd {
namespace {
namespace fs = std::filesystem;
using memory::Device;
using runtime::LifecycleState;
using namespace vramd::testing;  // NOLINT

constexpr int64_t kInputs = 6;
constexpr int64_t kOutputs = 3;
constexpr int kClients = 2;
constexpr char kServingPrefix[] = "serving; last load failed: ";

// ---------------------------------------------------------------------------------------------
// A backend that fails where its config says, after allocating. Config parameter "fault":
//   "load_model"          LoadModel allocates the weights, then fails;
//   "create_instance:K"   the K-th CreateInstance (1-based) allocates its workspace, then fails.
// Its output is INPUT0 + 1000 x the version, so a response says which version computed it.

constexpr size_t kFaultWeights = 256 << 10;
constexpr size_t kFaultWorkspace = 16 << 10;

struct FaultRecord {
  std::atomic<memory::OwnerId> load_owner{memory::kNoOwner};  // the last LoadModel's version owner
  std::atomic<uint64_t> allocated_bytes{0};  // by LoadModel and CreateInstance, cumulative
  std::atomic<int> failures{0};              // faults injected, cumulative
};
FaultRecord& Record() {
  static FaultRecord record;
  return record;
}

class FaultInstance : public backends::BackendInstance {
 public:
  FaultInstance(int64_t version, memory::Buffer workspace)
      : version_(version), workspace_(std::move(workspace)) {}
  Status Execute(const InferRequest& request, std::vector<Tensor>* outputs) override {
    return testing::AddVersionOffset(request, version_, outputs);
  }

 private:
  const int64_t version_;
  memory::Buffer workspace_;
};

class FaultModel : public backends::BackendModel {
 public:
  FaultModel(memory::Allocator* allocator, int64_t version, int fail_instance,
             memory::Buffer weights)
      : allocator_(allocator),
        version_(version),
        fail_instance_(fail_instance),
        weights_(std::move(weights)) {}
  Result<std::unique_ptr<backends::BackendInstance>> CreateInstance(
      const backends::InstanceContext& ctx) override {
    VRAMD_ASSIGN_OR_RETURN(auto workspace, allocator_->Allocate(Device::Cpu(), kFaultWorkspace));
    Record().allocated_bytes += kFaultWorkspace;
    if (++created_ == fail_instance_) {
      ++Record().failures;
      return Status::Internal("injected CreateInstance failure (after allocating a workspace)");
    }
    return std::unique_ptr<backends::BackendInstance>(
        std::make_unique<FaultInstance>(version_, std::move(workspace)));
  }

 private:
  memory::Allocator* const allocator_;
  const int64_t version_;
  const int fail_instance_;  // 0: none
  int created_ = 0;
  memory::Buffer weights_;
};

class FaultBackend : public backends::Backend {
 public:
  std::string_view name() const override { return "reload_fault_test"; }
  Result<std::unique_ptr<backends::BackendModel>> LoadModel(
      const backends::ModelContext& ctx) override {
    std::string fault;
    if (auto it = ctx.config->parameters().find("fault"); it != ctx.config->parameters().end()) {
      fault = it->second.string_value();
    }
    Record().load_owner = ctx.owner;
    // Charged to the version (LoadModel runs under its owner's scope).
    VRAMD_ASSIGN_OR_RETURN(auto weights, ctx.allocator->Allocate(Device::Cpu(), kFaultWeights));
    Record().allocated_bytes += kFaultWeights;
    if (fault == "load_model") {
      ++Record().failures;
      return Status::Internal("injected LoadModel failure (after allocating the weights)");
    }
    int fail_instance = 0;
    if (fault.rfind("create_instance:", 0) == 0) fail_instance = std::stoi(fault.substr(16));
    return std::unique_ptr<backends::BackendModel>(std::make_unique<FaultModel>(
        ctx.allocator, ctx.version, fail_instance, std::move(weights)));
  }
};

void RegisterFaultBackend() {
  static FaultBackend backend;
  static bool registered = backends::RegisterBackend(&backend).ok();
  ASSERT_TRUE(registered);
}

std::string FaultConfigText(const std::string& name, int instances, const std::string& fault) {
  std::string c = "name: \"" + name + "\"\nbackend: \"reload_fault_test\"\n" +
                  "input [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
                  "output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
                  "instance_group [ { kind: KIND_CPU count: " +
                  std::to_string(instances) + " } ]\n";
  if (!fault.empty()) {
    c += "parameters { key: \"fault\" value { string_value: \"" + fault + "\" } }\n";
  }
  return c;
}

std::shared_ptr<InferRequest> IntRequest(const std::string& id, std::vector<int32_t> x) {
  auto r = std::make_shared<InferRequest>();
  r->id = id;
  r->inputs.push_back(Tensor{"INPUT0", DataType::kInt32, {static_cast<int64_t>(x.size())},
                             SharedBuffer::CopyOf(x.data(), x.size() * sizeof(int32_t))});
  return r;
}

std::vector<int32_t> IntOutput(const InferResponse& response) {
  for (const auto& t : response.outputs) {
    if (t.name != "OUTPUT0" || t.datatype != DataType::kInt32) continue;
    std::vector<int32_t> y(t.data.size() / sizeof(int32_t));
    std::memcpy(y.data(), t.data.data(), y.size() * sizeof(int32_t));
    return y;
  }
  return {};
}

// ---------------------------------------------------------------------------------------------

class ReloadFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RegisterFaultBackend();
    for (int v : {1, 2, 3}) weights_[v] = RandomMlpWeights({kInputs, 12, kOutputs}, 40 + v, 0.5f);
    for (int c = 0; c < kClients; ++c) {
      inputs_.push_back(RandomMlpInput(1, kInputs, 500 + c));
      for (int v : {1, 2, 3}) expected_[v].push_back(MlpReference(weights_[v], inputs_[c], 1));
    }
  }

  // ---- the repository

  fs::path ModelDir(const std::string& name) const { return repo_.root() / name; }
  fs::path WeightsPath(const std::string& name, int64_t v) const {
    return ModelDir(name) / std::to_string(v) / "model.safetensors";
  }
  void WriteFile(const fs::path& path, const std::string& bytes) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  void AppendFile(const fs::path& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::app) << bytes;
  }
  void WriteWeights(const std::string& name, int64_t v) {
    WriteFile(WeightsPath(name, v), MlpSafetensorsBytes(weights_.at(v)));
  }
  // An mlp model with one CPU instance and good weights for `versions`; no version_policy in
  // its config.pbtxt (latest 1), explicit loads pick versions with an override.
  void WriteMlpModel(const std::string& name, std::vector<int64_t> versions) {
    WriteFile(ModelDir(name) / "config.pbtxt", MlpConfigText(name, kInputs, kOutputs, 1));
    for (int64_t v : versions) WriteWeights(name, v);
  }
  std::shared_ptr<const config::ModelConfig> MlpOverride(const std::string& name, int64_t v,
                                                         int instances = 1) const {
    return ConfigOverride(MlpConfigText(name, kInputs, kOutputs, instances), v);
  }

  // ---- the manager

  std::unique_ptr<runtime::ModelManager> Start(runtime::ModelControlMode mode) {
    auto o = memory_.Options({repo_.root()});
    o.model_control_mode = mode;
    o.poll_interval = std::chrono::hours(1);  // poll mode: the test calls PollOnce itself
    o.free_bytes = [](const std::string&) -> Result<int64_t> { return int64_t{1} << 50; };
    auto manager = runtime::ModelManager::Create(o);
    EXPECT_TRUE(manager.ok()) << manager.status().ToString();
    return manager.ok() ? std::move(manager).value() : nullptr;
  }

  // Clients of the mlp model `name` whose answers must come from one of `versions`.
  std::unique_ptr<LoadClients> MlpClients(const runtime::ModelManager& manager,
                                          const std::string& name, std::set<int64_t> versions) {
    return std::make_unique<LoadClients>(
        manager, name, kClients,
        [this](int c, uint64_t seq) {
          return FloatRequest("c" + std::to_string(c) + "-" + std::to_string(seq), inputs_[c]);
        },
        [this, versions](int c, const InferResponse& r) -> std::string {
          if (versions.count(r.model_version) == 0) {
            return "answered by version " + std::to_string(r.model_version);
          }
          const auto got = FloatOutput(r);
          if (!CloseTo(got, expected_.at(r.model_version)[c])) {
            return "version " + std::to_string(r.model_version) + " answered " +
                   FloatsString(got) + ", its reference is " +
                   FloatsString(expected_.at(r.model_version)[c]);
          }
          return "";
        });
  }

  // The clients' verdict: every request answered, consistently, by one of the versions allowed.
  static void ExpectNoFailure(LoadClients& clients) {
    clients.Stop();
    const auto counts = clients.counts();
    EXPECT_GT(counts.answered, 0u);
    EXPECT_EQ(counts.failed, 0u) << ::testing::PrintToString(counts.failures);
    EXPECT_EQ(counts.inconsistent, 0u) << ::testing::PrintToString(counts.complaints);
    EXPECT_EQ(counts.consistent, counts.answered);
  }

  // `name` answers a request with version `v`'s output.
  void ExpectMlpServes(const runtime::ModelManager& manager, const std::string& name, int64_t v) {
    auto found = manager.Find(name, 0);
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    EXPECT_EQ((*found)->version(), v);
    found = Status::Internal("dropped");
    RetriedOutcome r = InferWithRetry(manager, name, FloatRequest("probe", inputs_[0]));
    ASSERT_TRUE(r.outcome.ok()) << r.outcome.status().ToString();
    EXPECT_EQ(r.outcome->response.model_version, v);
    EXPECT_TRUE(CloseTo(FloatOutput(r.outcome->response), expected_.at(v)[0]))
        << FloatsString(FloatOutput(r.outcome->response));
  }

  static std::vector<runtime::ModelIndexEntry> Rows(const runtime::ModelManager& manager,
                                                    const std::string& name) {
    std::vector<runtime::ModelIndexEntry> rows;
    for (auto& e : manager.Index()) {
      if (e.name == name) rows.push_back(std::move(e));
    }
    return rows;
  }

  // After a failed reload of `name`: version `v` alone serves, READY, and the index and the
  // lifecycle give "serving; last load failed: <error>" with `error` the load's message (less
  // the manager's "failed to load '<name>': " prefix), which must contain `cause`.
  void ExpectFailedReloadKeptServing(const runtime::ModelManager& manager, const std::string& name,
                                     int64_t v, const Status& load, const std::string& cause) {
    ASSERT_FALSE(load.ok());
    EXPECT_NE(load.message().find(cause), std::string::npos)
        << "the error does not name '" << cause << "': " << load.message();
    const std::string prefix = "failed to load '" + name + "': ";
    ASSERT_EQ(load.message().rfind(prefix, 0), 0u) << load.message();
    const std::string error = load.message().substr(prefix.size());

    const auto rows = Rows(manager, name);
    ASSERT_EQ(rows.size(), 1u) << "index rows of '" << name << "'";
    EXPECT_EQ(rows[0].version, v);
    EXPECT_EQ(rows[0].state, "READY");
    EXPECT_EQ(rows[0].lifecycle, LifecycleState::kReady);
    EXPECT_EQ(rows[0].reason, kServingPrefix + error);

    auto life = manager.Lifecycle(name);
    ASSERT_TRUE(life.has_value());
    EXPECT_EQ(life->state, LifecycleState::kReady);
    EXPECT_EQ(life->reason, kServingPrefix + error);
    EXPECT_EQ(life->serving, std::vector<int64_t>{v});
    ASSERT_TRUE(life->last_load.has_value());
    EXPECT_FALSE(life->last_load->ok);
    EXPECT_EQ(life->last_load->error, error);
  }

  void ExpectLedgerIs(const LedgerState& want, const std::string& when) {
    const LedgerState now = CaptureLedger(memory_.ledger);
    EXPECT_EQ(now, want) << when << "\n  want: " << Describe(want) << "\n  have: " << Describe(now);
  }

  // Transitions into "loading" the lifecycle of `name` has seen (its history holds 32).
  static size_t Loads(const runtime::ModelManager& manager, const std::string& name) {
    auto life = manager.Lifecycle(name);
    if (!life) return 0;
    size_t n = 0;
    for (const auto& h : life->history) n += h.to == LifecycleState::kLoading;
    return n;
  }

  uint64_t PoolAllocations() const {
    uint64_t n = 0;
    for (const auto& p : memory_.allocator.PoolStatistics()) n += p.total_allocations;
    return n;
  }

  Watchdog watchdog_;  // first: outlives the rest of the fixture
  ScratchRepository repo_;
  TestMemory memory_;
  QuietLog quiet_;
  std::map<int64_t, MlpWeights> weights_;
  std::vector<std::vector<float>> inputs_;                       // by client
  std::map<int64_t, std::vector<std::vector<float>>> expected_;  // by version, then client
};

// (a) The new version's weights are corrupt: the load fails naming the file, v1 serves on.
TEST_F(ReloadFaultsTest, CorruptWeightsOfTheNewVersionKeepTheServingVersion) {
  WriteMlpModel("m", {1});
  auto manager = Start(runtime::ModelControlMode::kExplicit);
  ASSERT_NE(manager, nullptr);
  const LedgerState empty = CaptureLedger(memory_.ledger);
  watchdog_.Step("first load");
  ASSERT_TRUE(manager->Load("m", MlpOverride("m", 1)).ok());
  auto clients = MlpClients(*manager, "m", {1});
  ASSERT_TRUE(clients->WaitAnswered(0, 10));
  const LedgerState serving = CaptureLedger(memory_.ledger);

  const std::string good = MlpSafetensorsBytes(weights_[2]);
  const std::string other_shape =
      MlpSafetensorsBytes(RandomMlpWeights({kInputs, 12, kOutputs + 2}, 9, 0.5f));
  std::string garbage(4096, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>((i * 7919) % 251);
  const std::vector<std::pair<std::string, std::string>> corruptions = {
      {"truncated to half", good.substr(0, good.size() / 2)},
      {"truncated inside the header", good.substr(0, 12)},
      {"garbage", garbage},
      {"empty", ""},
      {"a header promising more than the file holds", std::string("\xff\xff\0\0\0\0\0\0{}", 10)},
      {"valid, but the last layer is too wide for the config", other_shape},
  };
  const std::string path = WeightsPath("m", 2).string();
  for (const auto& [what, bytes] : corruptions) {
    SCOPED_TRACE(what);
    WriteFile(WeightsPath("m", 2), bytes);
    watchdog_.Step("load of corrupt weights: " + what);
    Status load = manager->Load("m", MlpOverride("m", 2));
    ExpectFailedReloadKeptServing(*manager, "m", 1, load, path);
    ExpectMlpServes(*manager, "m", 1);
    ExpectLedgerIs(serving, "after the failed load (" + what + ")");
  }
  EXPECT_GT(clients->answered(), 0u);
  watchdog_.Step("stopping the clients");
  ExpectNoFailure(*clients);
  clients.reset();

  // Good weights: the reload succeeds and the failure is forgotten.
  WriteWeights("m", 2);
  watchdog_.Step("good reload");
  ASSERT_TRUE(manager->Load("m", MlpOverride("m", 2)).ok());
  ExpectMlpServes(*manager, "m", 2);
  const auto rows = Rows(*manager, "m");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].state, "READY");
  EXPECT_EQ(rows[0].reason, "");
  EXPECT_TRUE(manager->Lifecycle("m")->last_load->ok);
  ASSERT_TRUE(manager->Unload("m").ok());
  ExpectLedgerIs(empty, "after the final unload");
}

// (b) The backend fails in LoadModel, then in the second CreateInstance, each after allocating:
// what it allocated is released, the attempt's owners are closed, v1 serves on.
TEST_F(ReloadFaultsTest, BackendFailuresReleaseWhatTheyAllocated) {
  fs::create_directories(ModelDir("f") / "1");
  fs::create_directories(ModelDir("f") / "2");
  WriteFile(ModelDir("f") / "config.pbtxt", FaultConfigText("f", 1, ""));
  auto manager = Start(runtime::ModelControlMode::kExplicit);
  ASSERT_NE(manager, nullptr);
  const LedgerState empty = CaptureLedger(memory_.ledger);
  watchdog_.Step("first load");
  ASSERT_TRUE(manager->Load("f", ConfigOverride(FaultConfigText("f", 1, ""), 1)).ok());

  const std::vector<int32_t> x = {1, 2, 3};
  auto clients = std::make_unique<LoadClients>(
      *manager, "f", kClients, [&x](int, uint64_t seq) { return IntRequest(std::to_string(seq), x); },
      [](int, const InferResponse& r) -> std::string {
        const std::vector<int32_t> want = {1001, 1002, 1003};
        if (r.model_version != 1) return "answered by version " + std::to_string(r.model_version);
        return IntOutput(r) == want ? "" : "wrong output";
      });
  ASSERT_TRUE(clients->WaitAnswered(0, 10));
  const LedgerState serving = CaptureLedger(memory_.ledger);

  struct Fault {
    std::string fault;
    int instances;
    std::vector<std::string> causes;  // what the error must name
    uint64_t allocated;               // bytes the backend allocates before failing
  };
  const std::vector<Fault> faults = {
      {"load_model", 1, {"injected LoadModel failure", "model 'f' version 2"}, kFaultWeights},
      {"create_instance:2",
       2,
       {"injected CreateInstance failure", "model 'f' version 2: instance 'f_0_1'"},
       kFaultWeights + 2 * kFaultWorkspace},
  };
  for (const auto& f : faults) {
    SCOPED_TRACE(f.fault);
    const uint64_t allocated_before = Record().allocated_bytes;
    const int failures_before = Record().failures;
    watchdog_.Step("load with fault " + f.fault);
    Status load = manager->Load("f", ConfigOverride(FaultConfigText("f", f.instances, f.fault), 2));
    EXPECT_EQ(Record().failures, failures_before + 1) << "the fault was not injected";
    EXPECT_EQ(Record().allocated_bytes - allocated_before, f.allocated);
    for (const auto& cause : f.causes) {
      ExpectFailedReloadKeptServing(*manager, "f", 1, load, cause);
    }
    // The attempt's version owner, to which the backend charged its memory, is closed and,
    // holding nothing, gone from the tree.
    EXPECT_EQ(memory_.ledger.Stats(Record().load_owner).status().code(), StatusCode::kNotFound);
    ExpectLedgerIs(serving, "after the failed load (" + f.fault + ")");
    auto r = InferWithRetry(*manager, "f", IntRequest("probe", {5}));
    ASSERT_TRUE(r.outcome.ok()) << r.outcome.status().ToString();
    EXPECT_EQ(IntOutput(r.outcome->response), std::vector<int32_t>{1005});
  }
  watchdog_.Step("stopping the clients");
  ExpectNoFailure(*clients);
  clients.reset();

  watchdog_.Step("good reload");
  ASSERT_TRUE(manager->Load("f", ConfigOverride(FaultConfigText("f", 2, ""), 2)).ok());
  auto r = InferWithRetry(*manager, "f", IntRequest("probe", {5}));
  ASSERT_TRUE(r.outcome.ok()) << r.outcome.status().ToString();
  EXPECT_EQ(IntOutput(r.outcome->response), std::vector<int32_t>{2005});
  r.outcome = Status::Internal("dropped");
  EXPECT_EQ(manager->Lifecycle("f")->reason, "");
  ASSERT_TRUE(manager->Unload("f").ok());
  ExpectLedgerIs(empty, "after the final unload");
}

// (c) The k-th allocation of a reload fails, for every k of the N allocations a load makes
// (measured by a successful load; k = N + 1 then succeeds, which shows N is all of them).
TEST_F(ReloadFaultsTest, AllocationFailureAtEachAllocationOfAReload) {
  WriteMlpModel("m", {1, 2});
  auto manager = Start(runtime::ModelControlMode::kExplicit);
  ASSERT_NE(manager, nullptr);
  const LedgerState empty = CaptureLedger(memory_.ledger);
  watchdog_.Step("loads measuring N");
  ASSERT_TRUE(manager->Load("m", MlpOverride("m", 1)).ok());

  // The load to fault: version 2 with two instances. N, counted by the pools (every successful
  // allocation, transient ones included) and by the ledger (the new model's owners).
  const uint64_t pool_before = PoolAllocations();
  ASSERT_TRUE(manager->Load("m", MlpOverride("m", 2, /*instances=*/2)).ok());
  const int64_t n = static_cast<int64_t>(PoolAllocations() - pool_before);
  EXPECT_EQ(SubtreeTotalAllocations(memory_.ledger, memory::OwnerKind::kModel, "m"), n);
  ASSERT_GE(n, 3) << "weights and two workspaces at least";
  ASSERT_TRUE(manager->Load("m", MlpOverride("m", 1)).ok());

  // Requests allocate nothing through the allocator (so the clients cannot take the injected
  // failure): pending injection, requests all succeed, and the next load still gets it.
  memory_.allocator.InjectFailure(1);
  for (int i = 0; i < 20; ++i) {
    auto r = InferWithRetry(*manager, "m", FloatRequest("r", inputs_[0]));
    ASSERT_TRUE(r.outcome.ok()) << r.outcome.status().ToString();
  }
  EXPECT_FALSE(manager->Load("m", MlpOverride("m", 2, 2)).ok());
  memory_.allocator.InjectFailure(0);

  auto clients = MlpClients(*manager, "m", {1});
  ASSERT_TRUE(clients->WaitAnswered(0, 10));
  const LedgerState serving = CaptureLedger(memory_.ledger);
  for (int64_t k = 1; k <= n; ++k) {
    SCOPED_TRACE("allocation " + std::to_string(k) + " of " + std::to_string(n));
    watchdog_.Step("reload failing at allocation " + std::to_string(k));
    memory_.allocator.InjectFailure(static_cast<uint64_t>(k));
    Status load = manager->Load("m", MlpOverride("m", 2, 2));
    memory_.allocator.InjectFailure(0);
    ExpectFailedReloadKeptServing(*manager, "m", 1, load, "injected allocation failure");
    ExpectMlpServes(*manager, "m", 1);
    ExpectLedgerIs(serving, "after the failed load");
  }
  watchdog_.Step("stopping the clients");
  ExpectNoFailure(*clients);
  clients.reset();

  watchdog_.Step("reload with the failure after the last allocation");
  memory_.allocator.InjectFailure(static_cast<uint64_t>(n + 1));
  Status last = manager->Load("m", MlpOverride("m", 2, 2));
  memory_.allocator.InjectFailure(0);
  ASSERT_TRUE(last.ok()) << "a load makes more than " << n << " allocations: " << last.ToString();
  ExpectMlpServes(*manager, "m", 2);

  // The same for a first load, with nothing serving: failed, then a good load recovers.
  ASSERT_TRUE(manager->Unload("m").ok());
  ExpectLedgerIs(empty, "after unloading");
  for (int64_t k = 1; k <= n; ++k) {
    SCOPED_TRACE("first load, allocation " + std::to_string(k));
    watchdog_.Step("first load failing at allocation " + std::to_string(k));
    memory_.allocator.InjectFailure(static_cast<uint64_t>(k));
    Status load = manager->Load("m", MlpOverride("m", 2, 2));
    memory_.allocator.InjectFailure(0);
    ASSERT_FALSE(load.ok());
    EXPECT_NE(load.message().find("injected allocation failure"), std::string::npos)
        << load.message();
    EXPECT_EQ(manager->Lifecycle("m")->state, LifecycleState::kFailed);
    EXPECT_EQ(manager->Find("m", 0).status().code(), StatusCode::kUnavailable);
    const LedgerState now = CaptureLedger(memory_.ledger);
    EXPECT_EQ(now.live_bytes, empty.live_bytes);
    EXPECT_EQ(now.live_count, empty.live_count);
    EXPECT_EQ(now.leak_reports, empty.leak_reports);
  }
  watchdog_.Step("recovering load");
  ASSERT_TRUE(manager->Load("m", MlpOverride("m", 2, 2)).ok());
  ExpectMlpServes(*manager, "m", 2);
  ASSERT_TRUE(manager->Unload("m").ok());
  ExpectLedgerIs(empty, "after the final unload");
}

// (d) Poll mode: a version folder being written is not loaded while it changes; once two polls
// agree it is. A corrupt version that settles fails to load and the old version serves on.
TEST_F(ReloadFaultsTest, PollLoadsAVersionOnlyOnceItSettlesAndSurvivesACorruptOne) {
  WriteMlpModel("m", {1});
  watchdog_.Step("start");
  auto manager = Start(runtime::ModelControlMode::kPoll);
  ASSERT_NE(manager, nullptr);
  ExpectMlpServes(*manager, "m", 1);
  auto clients = MlpClients(*manager, "m", {1, 2});
  ASSERT_TRUE(clients->WaitAnswered(0, 10));
  const size_t loads = Loads(*manager, "m");
  ASSERT_TRUE(manager->PollOnce().ok());
  EXPECT_EQ(Loads(*manager, "m"), loads) << "nothing changed, yet the model reloaded";

  // Version 2 written in three steps, a poll after each: the folder changes at every poll.
  const std::string bytes = MlpSafetensorsBytes(weights_[2]);
  const size_t third = bytes.size() / 3;
  WriteFile(WeightsPath("m", 2), bytes.substr(0, third));
  watchdog_.Step("polls while version 2 is written");
  ASSERT_TRUE(manager->PollOnce().ok());
  EXPECT_EQ(Loads(*manager, "m"), loads) << "loaded a half-written version";
  AppendFile(WeightsPath("m", 2), bytes.substr(third, third));
  ASSERT_TRUE(manager->PollOnce().ok());
  EXPECT_EQ(Loads(*manager, "m"), loads) << "loaded a half-written version";
  AppendFile(WeightsPath("m", 2), bytes.substr(2 * third));
  ASSERT_TRUE(manager->PollOnce().ok());  // complete, but this poll differs from the last
  EXPECT_EQ(Loads(*manager, "m"), loads) << "loaded before two polls agreed";
  ExpectMlpServes(*manager, "m", 1);
  EXPECT_EQ(Rows(*manager, "m").at(0).reason, "");
  watchdog_.Step("the poll that agrees");
  ASSERT_TRUE(manager->PollOnce().ok());  // agrees with the last: reloaded
  EXPECT_EQ(Loads(*manager, "m"), loads + 1);
  ExpectMlpServes(*manager, "m", 2);
  ASSERT_TRUE(manager->Lifecycle("m")->last_load->ok);
  EXPECT_EQ(manager->Lifecycle("m")->last_load->versions, std::vector<int64_t>{2});
  const LedgerState serving = CaptureLedger(memory_.ledger);

  // Version 3 arrives corrupt and settles: the reload fails, version 2 serves on.
  std::string garbage(2048, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>((i * 31) % 253);
  WriteFile(WeightsPath("m", 3), garbage);
  watchdog_.Step("polls over a corrupt version 3");
  ASSERT_TRUE(manager->PollOnce().ok());
  EXPECT_EQ(Loads(*manager, "m"), loads + 1);
  ASSERT_TRUE(manager->PollOnce().ok());
  EXPECT_EQ(Loads(*manager, "m"), loads + 2);
  auto life = manager->Lifecycle("m");
  ASSERT_TRUE(life->last_load.has_value());
  EXPECT_FALSE(life->last_load->ok);
  EXPECT_NE(life->last_load->error.find(WeightsPath("m", 3).string()), std::string::npos)
      << life->last_load->error;
  ExpectFailedReloadKeptServing(
      *manager, "m", 2,
      Status::InvalidArgument("failed to load 'm': " + life->last_load->error),
      WeightsPath("m", 3).string());
  ExpectMlpServes(*manager, "m", 2);
  ExpectLedgerIs(serving, "after the failed poll reload");
  // The watcher acted on that state: no retry until the folder changes again.
  ASSERT_TRUE(manager->PollOnce().ok());
  EXPECT_EQ(Loads(*manager, "m"), loads + 2);

  // Version 3 withdrawn: once settled, the model reloads version 2, and is healthy again.
  fs::remove_all(ModelDir("m") / "3");
  watchdog_.Step("polls after withdrawing version 3");
  ASSERT_TRUE(manager->PollOnce().ok());
  ASSERT_TRUE(manager->PollOnce().ok());
  EXPECT_EQ(Loads(*manager, "m"), loads + 3);
  ExpectMlpServes(*manager, "m", 2);
  EXPECT_EQ(manager->Lifecycle("m")->reason, "");
  watchdog_.Step("stopping the clients");
  ExpectNoFailure(*clients);
}

// (e) config.pbtxt with a syntax error: explicit Load and poll mode. The error names file:line.
TEST_F(ReloadFaultsTest, ConfigSyntaxErrorKeepsTheServingVersion) {
  const std::string broken =  // line 3 is wrong
      "name: \"NAME\"\nbackend: \"mlp\"\nmax_batch_size: four\n";
  auto broken_for = [&](const std::string& name) {
    std::string c = broken;
    c.replace(c.find("NAME"), 4, name);
    return c;
  };
  WriteMlpModel("m", {1});
  WriteMlpModel("p", {1});
  const std::string config_m = (ModelDir("m") / "config.pbtxt").string();
  const std::string config_p = (ModelDir("p") / "config.pbtxt").string();

  {  // Explicit.
    auto manager = Start(runtime::ModelControlMode::kExplicit);
    ASSERT_NE(manager, nullptr);
    const LedgerState empty = CaptureLedger(memory_.ledger);
    watchdog_.Step("explicit: first load");
    ASSERT_TRUE(manager->Load("m").ok());
    auto clients = MlpClients(*manager, "m", {1});
    ASSERT_TRUE(clients->WaitAnswered(0, 10));
    const LedgerState serving = CaptureLedger(memory_.ledger);
    WriteFile(config_m, broken_for("m"));
    watchdog_.Step("explicit: load of the broken config");
    Status load = manager->Load("m");
    EXPECT_EQ(load.code(), StatusCode::kInvalidArgument);
    ExpectFailedReloadKeptServing(*manager, "m", 1, load, config_m + ":3:");
    ExpectMlpServes(*manager, "m", 1);
    ExpectLedgerIs(serving, "after the failed explicit load");
    watchdog_.Step("explicit: stopping the clients");
    ExpectNoFailure(*clients);
    clients.reset();
    // Unloaded (rather than left to the manager's destructor, which does not wait for what
    // still holds a version), so the poll part starts from an empty ledger.
    watchdog_.Step("explicit: unload");
    ASSERT_TRUE(manager->Unload("m").ok());
    ExpectLedgerIs(empty, "after the explicit part's unload");
  }
  {  // Poll.
    auto manager = Start(runtime::ModelControlMode::kPoll);
    ASSERT_NE(manager, nullptr);
    ExpectMlpServes(*manager, "p", 1);
    auto clients = MlpClients(*manager, "p", {1});
    ASSERT_TRUE(clients->WaitAnswered(0, 10));
    const LedgerState serving = CaptureLedger(memory_.ledger);
    const size_t loads = Loads(*manager, "p");
    WriteFile(config_p, broken_for("p"));
    watchdog_.Step("poll: polls over the broken config");
    ASSERT_TRUE(manager->PollOnce().ok());
    EXPECT_EQ(Loads(*manager, "p"), loads);
    ASSERT_TRUE(manager->PollOnce().ok());
    auto life = manager->Lifecycle("p");
    ASSERT_TRUE(life->last_load.has_value());
    EXPECT_FALSE(life->last_load->ok);
    ExpectFailedReloadKeptServing(
        *manager, "p", 1,
        Status::InvalidArgument("failed to load 'p': " + life->last_load->error),
        config_p + ":3:");
    ExpectMlpServes(*manager, "p", 1);
    ExpectLedgerIs(serving, "after the failed poll reload");

    // Repaired: once settled, reloaded and healthy.
    WriteFile(config_p, MlpConfigText("p", kInputs, kOutputs, 1));
    watchdog_.Step("poll: polls over the repaired config");
    ASSERT_TRUE(manager->PollOnce().ok());
    ASSERT_TRUE(manager->PollOnce().ok());
    EXPECT_TRUE(manager->Lifecycle("p")->last_load->ok);
    EXPECT_EQ(manager->Lifecycle("p")->reason, "");
    ExpectMlpServes(*manager, "p", 1);
    watchdog_.Step("poll: stopping the clients");
    ExpectNoFailure(*clients);
  }
}

// A first load that fails (nothing serves) leaves the model failed, with the cause in the index
// and the lifecycle and nothing in the ledger; a good load then recovers it. Explicit and poll.
TEST_F(ReloadFaultsTest, FirstLoadFailureShowsFailedAndAGoodLoadRecovers) {
  WriteFile(ModelDir("w") / "config.pbtxt", MlpConfigText("w", kInputs, kOutputs, 1));
  WriteFile(WeightsPath("w", 1), std::string(100, 'x'));  // corrupt weights
  WriteFile(ModelDir("c") / "config.pbtxt", "name: \"c\"\nbackend: \"mlp\"\nmax_batch_size: four\n");
  WriteWeights("c", 1);
  const std::string weights_w = WeightsPath("w", 1).string();
  const std::string config_c = (ModelDir("c") / "config.pbtxt").string();

  {  // Explicit.
    auto manager = Start(runtime::ModelControlMode::kExplicit);
    ASSERT_NE(manager, nullptr);
    const LedgerState empty = CaptureLedger(memory_.ledger);
    watchdog_.Step("explicit: failing first loads");
    Status w = manager->Load("w");
    ASSERT_FALSE(w.ok());
    EXPECT_NE(w.message().find(weights_w), std::string::npos) << w.message();
    Status c = manager->Load("c");
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.message().find(config_c + ":3:"), std::string::npos) << c.message();

    for (const auto& [name, cause] : {std::pair{"w", weights_w}, std::pair{"c", config_c + ":3:"}}) {
      SCOPED_TRACE(name);
      auto life = manager->Lifecycle(name);
      ASSERT_TRUE(life.has_value());
      EXPECT_EQ(life->state, LifecycleState::kFailed);
      EXPECT_NE(life->reason.find(cause), std::string::npos) << life->reason;
      EXPECT_TRUE(life->serving.empty());
      const auto rows = Rows(*manager, name);
      ASSERT_EQ(rows.size(), 1u);
      EXPECT_EQ(rows[0].state, "UNAVAILABLE");
      EXPECT_EQ(rows[0].lifecycle, LifecycleState::kFailed);
      EXPECT_NE(rows[0].reason.find(cause), std::string::npos) << rows[0].reason;
      auto found = manager->Find(name, 0);
      EXPECT_EQ(found.status().code(), StatusCode::kUnavailable);
      EXPECT_NE(found.status().message().find("no ready version"), std::string::npos)
          << found.status().message();
    }
    EXPECT_EQ(Rows(*manager, "w")[0].version, 1);  // the version that failed
    EXPECT_EQ(Rows(*manager, "c")[0].version, 0);  // no version: the config is unusable
    EXPECT_FALSE(manager->AllModelsReady());
    const LedgerState failed = CaptureLedger(memory_.ledger);
    EXPECT_EQ(failed.live_bytes, empty.live_bytes);
    EXPECT_EQ(failed.live_count, empty.live_count);
    EXPECT_EQ(failed.leak_reports, empty.leak_reports);

    WriteWeights("w", 1);
    WriteFile(config_c, MlpConfigText("c", kInputs, kOutputs, 1));
    watchdog_.Step("explicit: recovering loads");
    ASSERT_TRUE(manager->Load("w").ok());
    ASSERT_TRUE(manager->Load("c").ok());
    for (const char* name : {"w", "c"}) {
      SCOPED_TRACE(name);
      EXPECT_EQ(manager->Lifecycle(name)->state, LifecycleState::kReady);
      EXPECT_EQ(manager->Lifecycle(name)->reason, "");
      const auto rows = Rows(*manager, name);
      ASSERT_EQ(rows.size(), 1u);
      EXPECT_EQ(rows[0].state, "READY");
      ExpectMlpServes(*manager, name, 1);
    }
    EXPECT_TRUE(manager->AllModelsReady());
    ASSERT_TRUE(manager->Unload("w").ok());
    ASSERT_TRUE(manager->Unload("c").ok());
    ExpectLedgerIs(empty, "after unloading the recovered models");
  }

  // Poll: broken at start-up, repaired later: reloaded once two polls agree.
  WriteFile(WeightsPath("w", 1), std::string(100, 'x'));
  {
    watchdog_.Step("poll: start with a broken model");
    auto manager = Start(runtime::ModelControlMode::kPoll);
    ASSERT_NE(manager, nullptr);
    EXPECT_EQ(manager->Lifecycle("w")->state, LifecycleState::kFailed);
    EXPECT_EQ(manager->Find("w", 0).status().code(), StatusCode::kUnavailable);
    WriteWeights("w", 1);
    watchdog_.Step("poll: polls over the repaired model");
    ASSERT_TRUE(manager->PollOnce().ok());
    EXPECT_EQ(manager->Lifecycle("w")->state, LifecycleState::kFailed);
    ASSERT_TRUE(manager->PollOnce().ok());
    EXPECT_EQ(manager->Lifecycle("w")->state, LifecycleState::kReady);
    ExpectMlpServes(*manager, "w", 1);
  }
}

}  // namespace
}  // namespace vramd
