// Backends as shared libraries: tests/backends/echo_c loaded through the C ABI by FindBackend
// and the ModelManager, its memory in the ledger, and every way a library can be refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/shared_library/shared_library_backend.h"
#include "support/scratch_repository.h"

namespace vramd {
namespace {
namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kBackends = VRAMD_TEST_BACKENDS_DIR;

std::string EchoConfig(const std::string& backend, const std::string& parameters = "",
                       int instances = 1) {
  return "backend: \"" + backend + "\"\n" +
         "input [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ -1 ] },\n"
         "        { name: \"INPUT1\" data_type: TYPE_STRING dims: [ -1 ] } ]\n"
         "output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ -1 ] },\n"
         "         { name: \"OUTPUT1\" data_type: TYPE_STRING dims: [ -1 ] } ]\n"
         "instance_group [ { kind: KIND_CPU count: " + std::to_string(instances) + " } ]\n" +
         parameters;
}

std::string Parameter(const std::string& key, const std::string& value) {
  return "parameters { key: \"" + key + "\" value { string_value: \"" + value + "\" } }\n";
}

InferRequest Request(std::string id, std::vector<int32_t> ints, std::string bytes_element) {
  InferRequest r;
  r.id = std::move(id);
  r.inputs.push_back(Tensor{"INPUT0", DataType::kInt32, {static_cast<int64_t>(ints.size())},
                            SharedBuffer::CopyOf(ints.data(), ints.size() * sizeof(int32_t))});
  std::string serialized;
  AppendBytesElement(&serialized, bytes_element);
  r.inputs.push_back(
      Tensor{"INPUT1", DataType::kBytes, {1}, SharedBuffer::FromString(std::move(serialized))});
  return r;
}

class SharedLibraryBackendTest : public ::testing::Test {
 protected:
  // Destroys the manager (unloading every model) and checks that nothing is left or leaked.
  void StopAndExpectNothingLeft(std::unique_ptr<runtime::ModelManager>& manager) {
    manager.reset();
    EXPECT_TRUE(memory_.ledger.Leaks().empty());
    EXPECT_EQ(*memory_.ledger.SubtreeLiveBytes(memory_.ledger.root()), 0);
  }

  void SetUp() override { backends::SetBackendDirectory(kBackends); }

  std::unique_ptr<runtime::ModelManager> Start() {
    auto manager = runtime::ModelManager::Create(memory_.Options({repo_.root()}));
    EXPECT_TRUE(manager.ok()) << manager.status().ToString();
    return manager.ok() ? std::move(manager).value() : nullptr;
  }

  std::map<std::string, std::string> Reasons(const runtime::ModelManager& manager) {
    std::map<std::string, std::string> out;
    for (const auto& e : manager.Index()) out[e.name] = e.state + ": " + e.reason;
    return out;
  }

  std::map<std::string, memory::OwnerSnapshot> OwnersByPath() const {
    std::map<std::string, memory::OwnerSnapshot> out;
    for (auto& o : memory_.ledger.Snapshot()) out[memory_.ledger.OwnerPath(o.id)] = o;
    return out;
  }

  testing::ScratchRepository repo_;
  testing::TestMemory memory_;
};

TEST_F(SharedLibraryBackendTest, EchoesInputsAndAccountsItsMemory) {
  repo_.AddModel("echo", EchoConfig("echo_c", "", 2), {"1"});
  auto manager = Start();
  ASSERT_NE(manager, nullptr);
  auto model = manager->Find("echo", 0);
  ASSERT_TRUE(model.ok()) << model.status().ToString() << "\n" << Reasons(*manager)["echo"];

  // Each instance's workspace is charged to that instance.
  auto owners = OwnersByPath();
  EXPECT_EQ(owners["server/model:echo/version:1/instance:echo_0_0"].self.live_bytes, 4096);
  EXPECT_EQ(owners["server/model:echo/version:1/instance:echo_0_1"].self.live_bytes, 4096);

  for (int i = 0; i < 10; ++i) {
    auto outcome = (*model)->Infer(Request("r" + std::to_string(i), {1, -2, i}, "hello"));
    ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
    const auto& outputs = outcome->response.outputs;
    ASSERT_EQ(outputs.size(), 2u);
    EXPECT_EQ(outputs[0].name, "OUTPUT0");
    EXPECT_EQ(outputs[0].datatype, DataType::kInt32);
    EXPECT_EQ(outputs[0].shape, Shape({3}));
    int32_t got[3];
    ASSERT_EQ(outputs[0].data.size(), sizeof got);
    std::memcpy(got, outputs[0].data.data(), sizeof got);
    EXPECT_EQ(got[0], 1);
    EXPECT_EQ(got[1], -2);
    EXPECT_EQ(got[2], i);
    EXPECT_EQ(outputs[1].name, "OUTPUT1");
    EXPECT_EQ(outputs[1].datatype, DataType::kBytes);
    auto elements = SplitBytesElements(outputs[1].data.view(), "OUTPUT1", 1);
    ASSERT_TRUE(elements.ok());
    EXPECT_EQ((*elements)[0], "hello");
  }
  EXPECT_TRUE(memory_.ledger.Leaks().empty());  // per-request scratch was freed

  model = Status::NotFound("dropped");
  StopAndExpectNothingLeft(manager);
}

// A library's execute sees every field of the request, as its execute_requests would: the
// parameters as a JSON object, the requested outputs, the sequence ids and the timeout. It used
// to see only the id and the inputs (parameters_json NULL against the header's promise).
TEST_F(SharedLibraryBackendTest, ExecuteSeesTheWholeRequest) {
  repo_.AddModel("echo",
                 "backend: \"echo_c\"\n"
                 "input [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
                 "output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ -1 ] },\n"
                 "         { name: \"REQUEST\" data_type: TYPE_UINT8 dims: [ -1 ] } ]\n"
                 "instance_group [ { kind: KIND_CPU count: 1 } ]\n" +
                     Parameter("echo_request", "true"),
                 {"1"});
  auto manager = Start();
  ASSERT_NE(manager, nullptr);
  auto model = manager->Find("echo", 0);
  ASSERT_TRUE(model.ok()) << model.status().ToString() << "\n" << Reasons(*manager)["echo"];
  InferRequest r;
  r.id = "seen";
  int32_t v[2] = {7, 8};
  r.inputs.push_back(Tensor{"INPUT0", DataType::kInt32, {2}, SharedBuffer::CopyOf(v, sizeof v)});
  r.outputs = {RequestedOutput{"OUTPUT0"}, RequestedOutput{"REQUEST"}};
  r.parameters.push_back(InferParameter{"colour", std::string("blue")});
  r.correlation_id_string = "session-9";
  r.timeout_us = 2500;
  auto outcome = (*model)->Infer(std::move(r));
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  std::string seen;
  for (const Tensor& t : outcome->response.outputs) {
    if (t.name == "REQUEST") seen.assign(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  }
  EXPECT_THAT(seen, HasSubstr("id=seen "));
  EXPECT_THAT(seen, HasSubstr("correlation_id_string=session-9 "));
  EXPECT_THAT(seen, HasSubstr("timeout_us=2500 "));
  EXPECT_THAT(seen, HasSubstr("requested=2 "));
  EXPECT_THAT(seen, HasSubstr("parameters={\"colour\":\"blue\"}"));
  outcome = Status::NotFound("dropped");  // outcomes hold their version
  model = Status::NotFound("dropped");
  StopAndExpectNothingLeft(manager);
}

TEST_F(SharedLibraryBackendTest, ExecuteFailureNamesTheBackendAndServingGoesOn) {
  repo_.AddModel("echo", EchoConfig("echo_c"), {"1"});
  repo_.AddModel("always_fails", EchoConfig("echo_c", Parameter("fail_execute", "true")), {"1"});
  auto manager = Start();
  ASSERT_NE(manager, nullptr);

  auto failing = manager->Find("always_fails", 0);
  ASSERT_TRUE(failing.ok()) << failing.status().ToString();
  auto failed = (*failing)->Infer(Request("x", {1}, "a"));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kInternal);
  EXPECT_THAT(failed.status().message(), HasSubstr("backend 'echo_c'"));
  EXPECT_THAT(failed.status().message(), HasSubstr("fail_execute"));

  auto model = manager->Find("echo", 0);
  ASSERT_TRUE(model.ok());
  // An input starting with the magic byte fails that request only.
  auto magic = (*model)->Infer(Request("magic", {0xEE}, "a"));
  ASSERT_FALSE(magic.ok());
  EXPECT_EQ(magic.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(magic.status().message(), HasSubstr("backend 'echo_c'"));
  EXPECT_THAT(magic.status().message(), HasSubstr("failure byte"));
  {
    // Scoped: an outcome holds its version, which must be released before the unload below.
    auto next = (*model)->Infer(Request("next", {7}, "b"));
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    EXPECT_EQ(next->response.outputs.size(), 2u);
  }

  failing = Status::NotFound("dropped");
  model = Status::NotFound("dropped");
  StopAndExpectNothingLeft(manager);
}

TEST_F(SharedLibraryBackendTest, ModelCreateFailureFailsThatModelOnly) {
  repo_.AddModel("echo", EchoConfig("echo_c"), {"1"});
  repo_.AddModel("broken", EchoConfig("echo_c", Parameter("fail_create", "weights are bad")),
                 {"1"});
  auto manager = Start();
  ASSERT_NE(manager, nullptr);
  EXPECT_TRUE(manager->Find("echo", 0).ok());
  EXPECT_FALSE(manager->Find("broken", 0).ok());
  const std::string reason = Reasons(*manager)["broken"];
  EXPECT_THAT(reason, HasSubstr("UNAVAILABLE"));
  EXPECT_THAT(reason, HasSubstr("backend 'echo_c'"));
  EXPECT_THAT(reason, HasSubstr("cannot create model 'broken': weights are bad"));
  EXPECT_TRUE(memory_.ledger.Leaks().empty());
}

TEST_F(SharedLibraryBackendTest, WrongAbiIsRefusedNamingBothVersions) {
  repo_.AddModel("echo", EchoConfig("echo_c"), {"1"});
  repo_.AddModel("old", EchoConfig("wrong_abi"), {"1"});
  auto manager = Start();
  ASSERT_NE(manager, nullptr);
  EXPECT_TRUE(manager->Find("echo", 0).ok());
  const std::string reason = Reasons(*manager)["old"];
  EXPECT_THAT(reason, HasSubstr("libvramd_wrong_abi.so"));
  EXPECT_THAT(reason, HasSubstr("backend ABI version 42"));
  EXPECT_THAT(reason, HasSubstr("this vramd speaks version 1"));
}

TEST_F(SharedLibraryBackendTest, MissingLibraryIsNotFoundNamingThePath) {
  config::ModelConfig config;
  config.set_name("m");
  config.set_backend("missing");
  auto b = backends::FindBackend(config);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(b.status().message(),
              HasSubstr((kBackends / "missing" / "libvramd_missing.so").string()));
  // The built-ins, in the sorted list (tests in the same process may register more).
  EXPECT_THAT(b.status().message(), HasSubstr("available backends: add_sub, "));
  EXPECT_THAT(b.status().message(), HasSubstr(", ensemble, "));
  EXPECT_THAT(b.status().message(), HasSubstr(", identity"));
  EXPECT_THAT(b.status().message(), HasSubstr(", mlp"));

  // A platform maps to its backend name, which is then looked for as a library.
  config.clear_backend();
  config.set_platform("pytorch_libtorch");
  b = backends::FindBackend(config);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(b.status().message(), HasSubstr("pytorch/libvramd_pytorch.so"));
}

TEST_F(SharedLibraryBackendTest, NamesThatLeaveTheDirectoryAreRefused) {
  config::ModelConfig config;
  config.set_name("m");
  config.set_backend("../echo_c");
  auto b = backends::FindBackend(config);
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.status().message(), HasSubstr("not a valid backend library name"));
}

TEST_F(SharedLibraryBackendTest, LibraryIsLoadedOnce) {
  auto a = backends::LoadSharedLibraryBackend(kBackends, "echo_c");
  auto b = backends::LoadSharedLibraryBackend(kBackends, "echo_c");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ((*a)->name(), "echo_c");
  EXPECT_FALSE((*a)->SupportsGpu());
}

TEST_F(SharedLibraryBackendTest, BrokenTablesAreRefusedSayingWhy) {
  auto null_table = backends::LoadSharedLibraryBackend(kBackends, "null_table");
  ASSERT_FALSE(null_table.ok());
  EXPECT_THAT(null_table.status().message(), HasSubstr("libvramd_null_table.so"));
  EXPECT_THAT(null_table.status().message(), HasSubstr("returned no API table"));

  auto small = backends::LoadSharedLibraryBackend(kBackends, "small_table");
  ASSERT_FALSE(small.ok());
  EXPECT_THAT(small.status().message(), HasSubstr("libvramd_small_table.so"));
  EXPECT_THAT(small.status().message(), HasSubstr("needs at least"));

  auto no_entry = backends::LoadSharedLibraryBackend(kBackends, "no_entry");
  ASSERT_FALSE(no_entry.ok());
  EXPECT_EQ(no_entry.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(no_entry.status().message(), HasSubstr("libvramd_no_entry.so"));
  EXPECT_THAT(no_entry.status().message(), HasSubstr("vramd_backend_get_api"));
}

TEST_F(SharedLibraryBackendTest, ExecuteOnInstanceThreadsComesFromTheLibrarysTable) {
  auto echo = backends::LoadSharedLibraryBackend(kBackends, "echo_c");
  ASSERT_TRUE(echo.ok()) << echo.status().ToString();
  EXPECT_FALSE((*echo)->ExecutesOnInstanceThreads());
  auto declares = backends::LoadSharedLibraryBackend(kBackends, "instance_threads");
  ASSERT_TRUE(declares.ok()) << declares.status().ToString();
  EXPECT_TRUE((*declares)->ExecutesOnInstanceThreads());
}

TEST_F(SharedLibraryBackendTest, LibraryBuiltBeforeAnAppendedFieldStillServes) {
  // older_table's struct_size ends before execute_on_instance_threads (its memory says 1).
  repo_.AddModel("older", EchoConfig("older_table"), {"1"});
  auto manager = Start();
  ASSERT_NE(manager, nullptr);
  auto model = manager->Find("older", 0);
  ASSERT_TRUE(model.ok()) << model.status().ToString() << "\n" << Reasons(*manager)["older"];
  {
    // Scoped: an outcome holds its version, which must be released before the unload below.
    auto outcome = (*model)->Infer(Request("r", {5}, "x"));
    ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
    EXPECT_EQ(outcome->response.outputs.size(), 2u);
  }
  auto backend = backends::LoadSharedLibraryBackend(kBackends, "older_table");
  ASSERT_TRUE(backend.ok());
  EXPECT_FALSE((*backend)->ExecutesOnInstanceThreads()) << "read past the table's end";

  model = Status::NotFound("dropped");
  StopAndExpectNothingLeft(manager);
}

TEST_F(SharedLibraryBackendTest, DlopenFailureCarriesDlerror) {
  const fs::path dir = repo_.root() / "backends";
  fs::create_directories(dir / "junk");
  // Longer than an ELF header, so dlopen reads it and refuses the header.
  std::ofstream(dir / "junk" / "libvramd_junk.so") << std::string(4096, 'x');
  auto b = backends::LoadSharedLibraryBackend(dir, "junk");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInternal);
  EXPECT_THAT(b.status().message(), HasSubstr("libvramd_junk.so"));
  EXPECT_THAT(b.status().message(), HasSubstr("invalid ELF header"));
}

}  // namespace
}  // namespace vramd
