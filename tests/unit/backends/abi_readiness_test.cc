// The bridge of the two optional entry points appended to VramdBackendApi: instance_ready (read
// only where struct_size covers it; its code and message reach BackendInstance::Ready) and
// auto_complete_config (the config goes out as JSON and comes back parsed; the backend's errors
// come back; allocate is refused on its table).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>

#include "backends/abi/abi_backend.h"
#include "backends/identity/identity_backend.h"
#include "config/model_config_json.h"
#include "memory/allocator.h"
#include "memory/ledger.h"

namespace vramd::backends {
namespace {

using ::testing::HasSubstr;

VramdCode g_ready = VRAMD_OK;
int g_ready_calls = 0;

VramdCode FakeReady(void* instance, VramdError* error) {
  ++g_ready_calls;
  EXPECT_NE(instance, nullptr) << "the bridge must pass the instance's own handle";
  if (g_ready != VRAMD_OK) std::snprintf(error->message, sizeof error->message, "warming up");
  return g_ready;
}

// What the fake auto-complete saw, and what it answers.
struct Seen {
  std::string config_json, model_dir, version_dir;
  int64_t version = -1;
  VramdCode allocate = VRAMD_OK;
} g_seen;
std::optional<std::string> g_reply;
VramdCode g_complete_code = VRAMD_OK;

VramdCode FakeComplete(const VramdModelInfo* info,
                       void (*complete)(void* context, const char* json, size_t size),
                       void* context, VramdError* error) {
  g_seen.config_json.assign(info->config_json, info->config_json_size);
  g_seen.model_dir = info->model_dir;
  g_seen.version_dir = info->version_dir;
  g_seen.version = info->version;
  void* out = nullptr;
  VramdError allocate_error{};
  g_seen.allocate = info->server->allocate(info->server->server, 0, VRAMD_DEVICE_CPU, -1, 64,
                                           nullptr, &out, &allocate_error);
  if (g_complete_code != VRAMD_OK) {
    std::snprintf(error->message, sizeof error->message, "no model.py to ask");
    return g_complete_code;
  }
  if (g_reply) complete(context, g_reply->data(), g_reply->size());
  return VRAMD_OK;
}

VramdBackendApi FakeTable() {
  VramdBackendApi table = *IdentityBackendApi();
  table.instance_ready = &FakeReady;
  table.auto_complete_config = &FakeComplete;
  return table;
}

TEST(AbiReadinessTest, InstanceReadyIsReadOnlyWhereTheTableHasIt) {
  VramdBackendApi table = FakeTable();
  auto with = AbiBackend::Create(&table, "identity", std::nullopt);
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  EXPECT_TRUE((*with)->ChecksReadiness());

  VramdBackendApi unset = FakeTable();
  unset.instance_ready = nullptr;
  EXPECT_FALSE((*AbiBackend::Create(&unset, "identity", std::nullopt))->ChecksReadiness());

  // A library built before the field: what lies past its end is not its table.
  VramdBackendApi older = FakeTable();
  older.struct_size = offsetof(VramdBackendApi, instance_ready);
  auto old = AbiBackend::Create(&older, "identity", std::nullopt);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_FALSE((*old)->ChecksReadiness());
  EXPECT_FALSE(IdentityBackendApi()->instance_ready != nullptr);
}

TEST(AbiReadinessTest, ReadyCarriesTheBackendsCodeAndReason) {
  memory::Ledger ledger;
  memory::Allocator allocator(&ledger);
  config::ModelConfig config;
  config.set_name("ready_m");
  config.set_backend("identity");
  auto* in = config.add_input();
  in->set_name("INPUT0");
  in->set_data_type(config::TYPE_INT32);
  in->add_dims(-1);
  auto* out = config.add_output();
  out->set_name("OUTPUT0");
  out->set_data_type(config::TYPE_INT32);
  out->add_dims(-1);
  VramdBackendApi table = FakeTable();
  auto backend = AbiBackend::Create(&table, "identity", std::nullopt);
  ASSERT_TRUE(backend.ok());
  ModelContext ctx;
  ctx.name = "ready_m";
  ctx.version = 1;
  ctx.config = &config;
  ctx.allocator = &allocator;
  auto model = (*backend)->LoadModel(ctx);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto instance = (*model)->CreateInstance(InstanceContext{"ready_m_0", 0, DeviceKind::kCpu, -1});
  ASSERT_TRUE(instance.ok()) << instance.status().ToString();

  g_ready = VRAMD_OK;
  g_ready_calls = 0;
  EXPECT_TRUE((*instance)->Ready().ok());
  g_ready = VRAMD_UNAVAILABLE;
  Status not_ready = (*instance)->Ready();
  EXPECT_EQ(not_ready.code(), StatusCode::kUnavailable);
  EXPECT_THAT(not_ready.message(), HasSubstr("instance 'ready_m_0'"));
  EXPECT_THAT(not_ready.message(), HasSubstr("warming up"));
  EXPECT_EQ(g_ready_calls, 2);

  // The same table read as an older library's: the entry point is never called.
  VramdBackendApi older = FakeTable();
  older.struct_size = offsetof(VramdBackendApi, instance_ready);
  auto old_backend = AbiBackend::Create(&older, "identity", std::nullopt);
  auto old_model = (*old_backend)->LoadModel(ctx);
  ASSERT_TRUE(old_model.ok());
  auto old_instance =
      (*old_model)->CreateInstance(InstanceContext{"ready_m_0", 0, DeviceKind::kCpu, -1});
  ASSERT_TRUE(old_instance.ok());
  EXPECT_TRUE((*old_instance)->Ready().ok());
  EXPECT_EQ(g_ready_calls, 2);
  g_ready = VRAMD_OK;
}

TEST(AbiAutoCompleteTest, TheCompletedJsonReplacesTheConfig) {
  VramdBackendApi table = FakeTable();
  auto backend = AbiBackend::Create(&table, "identity", std::nullopt);
  ASSERT_TRUE(backend.ok());
  config::ModelConfig config;
  config.set_name("auto_m");
  config.set_backend("identity");
  g_reply = R"({"name":"auto_m","backend":"identity","max_batch_size":8,
      "input":[{"name":"INPUT0","data_type":"TYPE_INT32","dims":[-1]}],
      "output":[{"name":"OUTPUT0","data_type":"TYPE_INT32","dims":[-1]}],
      "dynamic_batching":{}})";
  g_complete_code = VRAMD_OK;
  Status done = (*backend)->AutoCompleteConfig("/repo/auto_m", 3, &config);
  ASSERT_TRUE(done.ok()) << done.ToString();
  EXPECT_EQ(g_seen.config_json, config::ModelConfigToJson([] {
              config::ModelConfig c;
              c.set_name("auto_m");
              c.set_backend("identity");
              return c;
            }()));
  EXPECT_EQ(g_seen.model_dir, "/repo/auto_m");
  EXPECT_EQ(g_seen.version_dir, "/repo/auto_m/3");
  EXPECT_EQ(g_seen.version, 3);
  EXPECT_EQ(g_seen.allocate, VRAMD_UNAVAILABLE) << "auto-complete's table gives no memory";
  EXPECT_EQ(config.max_batch_size(), 8);
  ASSERT_EQ(config.input_size(), 1);
  EXPECT_EQ(config.input(0).name(), "INPUT0");
  ASSERT_EQ(config.output_size(), 1);
  EXPECT_TRUE(config.has_dynamic_batching());

  // Not calling `complete` keeps the config.
  g_reply.reset();
  config::ModelConfig kept = config;
  ASSERT_TRUE((*backend)->AutoCompleteConfig("/repo/auto_m", 0, &config).ok());
  EXPECT_EQ(config.SerializeAsString(), kept.SerializeAsString());
  EXPECT_EQ(g_seen.version_dir, "") << "no version selected: no version directory";
}

TEST(AbiAutoCompleteTest, FailuresComeBack) {
  VramdBackendApi table = FakeTable();
  auto backend = AbiBackend::Create(&table, "identity", std::nullopt);
  config::ModelConfig config;
  config.set_name("auto_bad");
  config.set_backend("identity");

  g_complete_code = VRAMD_INVALID_ARGUMENT;
  Status failed = (*backend)->AutoCompleteConfig("/repo/auto_bad", 1, &config);
  EXPECT_EQ(failed.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(failed.message(), "no model.py to ask") << "a built-in's message passes unchanged";

  g_complete_code = VRAMD_OK;
  g_reply = "[1, 2]";
  Status garbage = (*backend)->AutoCompleteConfig("/repo/auto_bad", 1, &config);
  EXPECT_EQ(garbage.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(garbage.message(), HasSubstr("returned a config that is not one"));
  EXPECT_EQ(config.name(), "auto_bad") << "a failed auto-complete leaves the config";
  g_reply.reset();

  // Without the entry point (or an older table), nothing is called and nothing changes.
  VramdBackendApi older = FakeTable();
  older.struct_size = offsetof(VramdBackendApi, auto_complete_config);
  g_seen.version = -1;
  auto old = AbiBackend::Create(&older, "identity", std::nullopt);
  EXPECT_TRUE((*old)->AutoCompleteConfig("/repo/auto_bad", 1, &config).ok());
  EXPECT_EQ(g_seen.version, -1);
}

}  // namespace
}  // namespace vramd::backends
