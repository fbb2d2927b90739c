// Backend libraries hosted out of process (src/backends/remote/): models of tests/backends'
// echo_c and remote_probe loaded by the ModelManager with VRAMD_<BACKEND>_HOSTING, answered by
// vramd_backend_host processes; a host killed with SIGKILL in the middle of a request (the
// request errors naming the model and the signal, the restart is counted, the next request is
// served by a new process); a host that hangs past VRAMD_STUB_CALL_TIMEOUT_MS is killed the same
// way, the model reading not ready (CheckReady, the index) until it serves again; a request the
// host drops is ended after that timeout, and the host says at unload that its backend never
// completed it; instance_ready asked across the wire; nothing left behind (descriptors,
// /dev/shm, child processes), and every host exits with status 0 at unload (under the
// sanitizers a host that leaks exits with another).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "backends/backend_config.h"
#include "backends/remote/hosting.h"
#include "backends/remote/stub.h"
#include "memory/cuda_devices.h"
#include "memory/hosted_processes.h"
#include "support/captured_log.h"
#include "support/scratch_repository.h"

namespace vramd {
namespace {
namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kBackends = VRAMD_TEST_BACKENDS_DIR;

size_t OpenFds() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

size_t DevShmEntries() { return std::distance(fs::directory_iterator("/dev/shm"), {}); }

// Live children of this process (hosts), by pid.
std::set<pid_t> Children() {
  std::set<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    char state;
    int ppid;
    if (std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == getpid() &&
        state != 'Z') {
      out.insert(std::stoi(name));
    }
  }
  return out;
}

std::string Config(const std::string& backend, const std::string& hosting, int instances,
                   const std::string& extra = "") {
  std::string c = "backend: \"" + backend + "\"\n" +
                  "input [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
                  "output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ -1 ] },\n"
                  "         { name: \"OUTPUT1\" data_type: TYPE_INT64 dims: [ 2 ] } ]\n"
                  "instance_group [ { kind: KIND_CPU count: " + std::to_string(instances) + " } ]\n";
  std::string key = "VRAMD_";
  for (char ch : backend) key += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  key += "_HOSTING";
  if (!hosting.empty()) {
    c += "parameters { key: \"" + key + "\" value { string_value: \"" + hosting + "\" } }\n";
  }
  return c + extra;
}

InferRequest Request(std::vector<int32_t> ints) {
  InferRequest r;
  r.id = "r";
  r.inputs.push_back(Tensor{"INPUT0", DataType::kInt32, {static_cast<int64_t>(ints.size())},
                            SharedBuffer::CopyOf(ints.data(), ints.size() * sizeof(int32_t))});
  return r;
}

class HostingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backends::SetBackendDirectory(kBackends);
    fds_before_ = OpenFds();
    shm_before_ = DevShmEntries();
  }
  void TearDown() override {
    Unload();
    EXPECT_TRUE(Children().empty()) << "a host process outlived its model";
    EXPECT_TRUE(HostedPids().empty()) << "a host is still listed for the memory report";
    EXPECT_EQ(OpenFds(), fds_before_) << "a descriptor leaked";
    EXPECT_EQ(DevShmEntries(), shm_before_);
    EXPECT_TRUE(memory_.ledger.Leaks().empty());
  }
  // Unloads every model; what that logged is kept in unload_log_.
  void Unload() {
    if (manager_ == nullptr) return;
    {
      testing::CapturedLog log;
      manager_.reset();
      unload_log_ = log.text();
    }
    EXPECT_THAT(unload_log_, ::testing::Not(HasSubstr("after its model was destroyed")))
        << "a host did not exit with status 0 at unload";
  }
  void Start() {
    auto manager = runtime::ModelManager::Create(memory_.Options({repo_.root()}));
    ASSERT_TRUE(manager.ok()) << manager.status().ToString();
    manager_ = std::move(manager).value();
  }
  std::string State(const std::string& model) {
    for (const auto& e : manager_->Index()) {
      if (e.name == model) return e.state;
    }
    return "";
  }
  std::string Reason(const std::string& model) {
    for (const auto& e : manager_->Index()) {
      if (e.name == model) return e.state + ": " + e.reason;
    }
    return "";
  }
  // The pid of the process that serves `model`'s first request (-1 when it fails).
  static pid_t ServingPid(runtime::LoadedModel& model) {
    auto first = model.Infer(Request({1}));
    EXPECT_TRUE(first.ok()) << first.status().ToString();
    return first.ok() ? static_cast<pid_t>(PidOf(first->response).first) : -1;
  }
  // A request once `model` serves again after a restart; until then requests fail at once,
  // saying it is restarting.
  static Result<runtime::InferOutcome> ServedAgain(runtime::LoadedModel& model) {
    Result<runtime::InferOutcome> next = Status::Unavailable("not yet");
    for (int i = 0; i < 500; ++i) {
      next = model.Infer(Request({2}));
      if (next.ok()) break;
      EXPECT_THAT(next.status().message(), HasSubstr("is restarting"));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return next;
  }
  // The hosts listed for the memory report (memory/hosted_processes.h), each under the
  // ledger owner of the model version it serves.
  std::vector<uint32_t> HostedPids() {
    std::vector<uint32_t> pids;
    for (const memory::HostedProcess& h : memory::HostedProcesses::Global().List()) {
      EXPECT_NE(h.owner, memory::kNoOwner);
      EXPECT_THAT(h.label, HasSubstr("model '"));
      pids.push_back(h.pid);
    }
    return pids;
  }
  // OUTPUT1 of a probe response: {pid, instances created in that process}.
  static std::pair<int64_t, int64_t> PidOf(const InferResponse& response) {
    int64_t v[2] = {0, 0};
    for (const Tensor& t : response.outputs) {
      if (t.name == "OUTPUT1" && t.data.size() == sizeof v) std::memcpy(v, t.data.data(), sizeof v);
    }
    return {v[0], v[1]};
  }

  testing::ScratchRepository repo_;
  testing::TestMemory memory_;
  std::unique_ptr<runtime::ModelManager> manager_;
  std::string unload_log_;  // what the unload in TearDown logged
  size_t fds_before_ = 0, shm_before_ = 0;
};

TEST_F(HostingTest, EchoAnswersTheSameInAStub) {
  const std::string echo =
      "backend: \"echo_c\"\n"
      "input [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
      "output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
      "instance_group [ { kind: KIND_CPU count: 2 } ]\n";
  repo_.AddModel("local", echo, {"1"});
  repo_.AddModel("hosted", echo + "parameters { key: \"VRAMD_ECHO_C_HOSTING\" value { string_value: \"stub\" } }\n", {"1"});
  Start();
  EXPECT_EQ(Children().size(), 1u);  // one process for both instances
  auto local = manager_->Find("local", 0);
  auto hosted = manager_->Find("hosted", 0);
  ASSERT_TRUE(local.ok() && hosted.ok()) << Reason("hosted");
  std::vector<int32_t> big(100000);  // 400 KB: crosses in a memfd segment
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<int32_t>(i * 7);
  for (const auto& ints : {std::vector<int32_t>{1, -2, 3}, big}) {
    auto a = (*local)->Infer(Request(ints));
    auto b = (*hosted)->Infer(Request(ints));
    ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
    ASSERT_EQ(b->response.outputs.size(), 1u);
    EXPECT_EQ(b->response.outputs[0].shape, a->response.outputs[0].shape);
    EXPECT_EQ(b->response.outputs[0].data.view(), a->response.outputs[0].data.view());
  }
  // An execute error crosses with its code and text.
  auto failed = (*hosted)->Infer(Request({0xEE}));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(failed.status().message(), HasSubstr("backend 'echo_c'"));
  EXPECT_THAT(failed.status().message(), HasSubstr("failure byte"));
}

TEST_F(HostingTest, StubSharesOneProcessAndProcessPerInstanceDoesNot) {
  repo_.AddModel("stub", Config("remote_probe", "stub", 3), {"1"});
  repo_.AddModel("ppi", Config("remote_probe", "process_per_instance", 2), {"1"});
  Start();
  auto stub = manager_->Find("stub", 0);
  auto ppi = manager_->Find("ppi", 0);
  ASSERT_TRUE(stub.ok()) << Reason("stub");
  ASSERT_TRUE(ppi.ok()) << Reason("ppi");
  EXPECT_EQ(Children().size(), 3u);  // 1 + 2
  auto a = (*stub)->Infer(Request({5}));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(PidOf(a->response).second, 3);  // the three instances were made in its process
  EXPECT_NE(PidOf(a->response).first, getpid());
  auto b = (*ppi)->Infer(Request({5}));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(PidOf(b->response).second, 1);  // one instance per process
}

TEST_F(HostingTest, AKilledHostFailsItsRequestAndIsRestarted) {
  const fs::path marker = fs::path(::testing::TempDir()) / ("probe-hang-" + std::to_string(getpid()));
  fs::remove(marker);
  ASSERT_EQ(::setenv("PROBE_HANG_MARKER", marker.c_str(), 1), 0);
  repo_.AddModel("probe", Config("remote_probe", "stub", 2), {"1"});
  Start();
  auto model = manager_->Find("probe", 0);
  ASSERT_TRUE(model.ok()) << Reason("probe");
  const pid_t pid = ServingPid(**model);
  ASSERT_GT(pid, 0);
  const size_t fds_serving = OpenFds();
  const uint64_t restarts_before = backends::remote::Stub::TotalRestarts();
  EXPECT_EQ(HostedPids(), std::vector<uint32_t>{static_cast<uint32_t>(pid)})
      << "the memory report's list of hosts (NVML per PID)";

  auto hung = std::async(std::launch::async, [&] { return (*model)->Infer(Request({9999})); });
  // The probe creates the marker once it is inside execute.
  for (int i = 0; i < 1000 && !fs::exists(marker); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(fs::exists(marker)) << "the probe never started the hanging request";
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  auto outcome = hung.get();
  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(outcome.status().message(), HasSubstr("model 'probe' version 1"));
  EXPECT_THAT(outcome.status().message(), HasSubstr("killed by signal 9"));
  fs::remove(marker);

  // Served again by a new process once restarted; until then requests fail fast.
  auto next = ServedAgain(**model);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_NE(PidOf(next->response).first, pid);
  EXPECT_EQ(PidOf(next->response).second, 2);  // both instances created again
  EXPECT_EQ(backends::remote::Stub::TotalRestarts(), restarts_before + 1);
  EXPECT_EQ(OpenFds(), fds_serving) << "the killed process's descriptors outlived it";
  EXPECT_EQ(Children().size(), 1u);
  EXPECT_EQ(HostedPids(), std::vector<uint32_t>{static_cast<uint32_t>(PidOf(next->response).first)})
      << "the killed process is no longer listed, its successor is";
  ::unsetenv("PROBE_HANG_MARKER");
}

TEST_F(HostingTest, ExecuteErrorsAndRefusalsNameTheirCause) {
  repo_.AddModel("probe", Config("remote_probe", "stub", 1), {"1"});
  repo_.AddModel("gpu", Config("remote_probe", "stub", 1,
                               "parameters { key: \"try_gpu_allocate\" value { string_value: \"1\" } }\n"),
                 {"1"});
  repo_.AddModel("bad", Config("remote_probe", "sideways", 1), {"1"});
  Start();
  auto model = manager_->Find("probe", 0);
  ASSERT_TRUE(model.ok()) << Reason("probe");
  auto failed = (*model)->Infer(Request({7777}));
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(), HasSubstr("asked to fail"));
  EXPECT_TRUE((*model)->Infer(Request({1})).ok());
  // GPU memory in a host is the server's (DeviceAllocate, CUDA IPC): without a device here the
  // server's refusal reaches the host's backend (the GPU check maps it on the device).
  if (memory::CudaDeviceCount() == 0) {
    EXPECT_THAT(Reason("gpu"), HasSubstr("cuda:0"));
  } else {
    EXPECT_TRUE(manager_->Find("gpu", 0).ok()) << Reason("gpu");
  }
  EXPECT_THAT(Reason("bad"), HasSubstr("VRAMD_REMOTE_PROBE_HOSTING is \"sideways\""));
}

// A short call timeout: the probe's own calls (a C library) take milliseconds, but the timeout
// covers a restarted stub's model_create too, which under the sanitizers on a loaded 2-core
// machine took over 500 ms (a second restart then failed the count below).
const std::string kShortTimeout =
    "parameters { key: \"VRAMD_STUB_CALL_TIMEOUT_MS\" value { string_value: \"1500\" } }\n";

TEST_F(HostingTest, AHungHostIsKilledAtTheCallTimeoutAndTheModelIsUnreadyUntilItServes) {
  repo_.AddModel("probe", Config("remote_probe", "stub", 2, kShortTimeout), {"1"});
  Start();
  auto model = manager_->Find("probe", 0);
  ASSERT_TRUE(model.ok()) << Reason("probe");
  const pid_t pid = ServingPid(**model);
  ASSERT_GT(pid, 0);
  EXPECT_TRUE((*model)->CheckReady().ok());
  const size_t fds_serving = OpenFds();
  const uint64_t restarts_before = backends::remote::Stub::TotalRestarts();

  const auto start = std::chrono::steady_clock::now();
  auto hung = (*model)->Infer(Request({9999}));  // the probe never returns from it
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1500));
  ASSERT_FALSE(hung.ok());
  EXPECT_EQ(hung.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(hung.status().message(), HasSubstr("model 'probe' version 1"));
  EXPECT_THAT(hung.status().message(),
              HasSubstr("hung: execute_requests did not return within 1500 ms"));
  EXPECT_THAT(hung.status().message(), HasSubstr("killed"));

  // Not ready from the moment the request has its error until the new process serves.
  Status ready = (*model)->CheckReady();
  EXPECT_THAT(ready.message(), HasSubstr("is restarting"));
  EXPECT_EQ(State("probe"), "UNAVAILABLE");
  EXPECT_THAT(Reason("probe"), HasSubstr("is restarting"));
  auto next = ServedAgain(**model);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_NE(PidOf(next->response).first, pid);
  EXPECT_EQ(PidOf(next->response).second, 2);  // both instances created again
  EXPECT_TRUE((*model)->CheckReady().ok());
  EXPECT_EQ(State("probe"), "READY");
  EXPECT_EQ(backends::remote::Stub::TotalRestarts(), restarts_before + 1);
  EXPECT_EQ(OpenFds(), fds_serving) << "the hung process's descriptors outlived it";
  EXPECT_EQ(Children().size(), 1u);
}

TEST_F(HostingTest, ARequestTheHostDropsIsEndedAfterTheTimeoutAndTheHostKept) {
  repo_.AddModel("probe", Config("remote_probe", "stub", 1, kShortTimeout), {"1"});
  Start();
  {  // outcomes hold their version: they go before the unload below
    auto model = manager_->Find("probe", 0);
    ASSERT_TRUE(model.ok()) << Reason("probe");
    const uint64_t restarts_before = backends::remote::Stub::TotalRestarts();
    const auto start = std::chrono::steady_clock::now();
    auto dropped = (*model)->Infer(Request({5555}));  // execute_requests returns, never responds
    EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1500));
    ASSERT_FALSE(dropped.ok());
    EXPECT_THAT(dropped.status().message(),
                HasSubstr("sent no response to request 'r' for 1500 ms"));
    // The process answered its call: it is not hung, and goes on serving.
    auto after = (*model)->Infer(Request({3}));
    ASSERT_TRUE(after.ok()) << after.status().ToString();
    EXPECT_EQ(backends::remote::Stub::TotalRestarts(), restarts_before);
  }
  // At unload the host frees the request its backend kept (it leaked before) and says so.
  Unload();
  EXPECT_THAT(unload_log_, HasSubstr("the backend never sent a final response for 1 request(s) "
                                     "before its model was destroyed"));
}

// The process that completes a config (auto_complete_config) makes no model and exits with
// status 0, as a serving host does at unload (it used to exit with 1, as if vramd had gone
// away with a model up).
TEST_F(HostingTest, TheProcessThatCompletesTheConfigExitsCleanly) {
  repo_.AddModel("probe", Config("remote_probe", "stub", 1), {"1"});
  std::string started;
  {
    testing::CapturedLog log;
    Start();
    started = log.text();
  }
  auto model = manager_->Find("probe", 0);
  ASSERT_TRUE(model.ok()) << Reason("probe");
  EXPECT_THAT(started, ::testing::Not(HasSubstr("after completing the config"))) << started;
}

TEST_F(HostingTest, InstanceReadyIsAskedInTheHost) {
  repo_.AddModel("ready", Config("remote_probe", "process_per_instance", 2), {"1"});
  repo_.AddModel("unready", Config("remote_probe", "stub", 1,
                                   "parameters { key: \"probe_not_ready\" value { string_value: \"1\" } }\n"),
                 {"1"});
  Start();
  auto ready = manager_->Find("ready", 0);
  auto unready = manager_->Find("unready", 0);
  ASSERT_TRUE(ready.ok() && unready.ok()) << Reason("unready");
  EXPECT_TRUE((*ready)->CheckReady().ok());
  Status no = (*unready)->CheckReady();
  EXPECT_EQ(no.code(), StatusCode::kUnavailable);
  EXPECT_THAT(no.message(), HasSubstr("asked to be not ready"));
  EXPECT_THAT(no.message(), HasSubstr("model 'unready' version 1 is not ready"));
  // It still serves (readiness is what clients are told, not a gate), and the index, which
  // asks no backend, lists it as loaded.
  EXPECT_TRUE((*unready)->Infer(Request({1})).ok());
  EXPECT_EQ(State("unready"), "READY");
}

TEST(CallTimeoutTest, ReadFromTheConfigElseTheBackendSettingElseTheDefault) {
  using backends::remote::ChooseCallTimeout;
  config::ModelConfig config;
  config.set_name("m");
  auto chosen = ChooseCallTimeout(config, "python");
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(*chosen, backends::remote::kDefaultCallTimeout);

  auto flag = backends::ParseBackendSetting("python,stub-call-timeout-ms=1234");
  ASSERT_TRUE(flag.ok()) << flag.status().ToString();
  backends::SetBackendSettings({*flag});
  chosen = ChooseCallTimeout(config, "python");
  EXPECT_TRUE(chosen.ok() && *chosen == std::chrono::milliseconds(1234));
  chosen = ChooseCallTimeout(config, "other");
  EXPECT_TRUE(chosen.ok() && *chosen == backends::remote::kDefaultCallTimeout);
  EXPECT_THAT(backends::ParseBackendSetting("stub-call-timeout-ms=soon").status().message(),
              HasSubstr("stub-call-timeout-ms is \"soon\"; it takes a whole number"));

  (*config.mutable_parameters())["VRAMD_STUB_CALL_TIMEOUT_MS"].set_string_value("0");
  chosen = ChooseCallTimeout(config, "python");  // the parameter wins; 0 is no timeout
  EXPECT_TRUE(chosen.ok() && chosen->count() == 0);
  for (const char* bad : {"", "-5", "12ms", "99999999999"}) {
    (*config.mutable_parameters())["VRAMD_STUB_CALL_TIMEOUT_MS"].set_string_value(bad);
    chosen = ChooseCallTimeout(config, "python");
    ASSERT_FALSE(chosen.ok()) << bad;
    EXPECT_THAT(chosen.status().message(),
                HasSubstr("model 'm': parameter VRAMD_STUB_CALL_TIMEOUT_MS is \"" + std::string(bad) + "\""));
  }
  backends::SetBackendSettings({});
}

}  // namespace
}  // namespace vramd
