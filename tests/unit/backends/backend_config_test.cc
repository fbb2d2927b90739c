// --backend-config (backends/backend_config.h) and the hosting it picks (remote/hosting.h).
#include "backends/backend_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "backends/remote/hosting.h"
#include "config/model_config_parser.h"

namespace vramd::backends {
namespace {

using ::testing::HasSubstr;

class BackendConfigTest : public ::testing::Test {
 protected:
  void TearDown() override { SetBackendSettings({}); }
};

BackendSetting Parsed(std::string_view arg) {
  auto s = ParseBackendSetting(arg);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? *s : BackendSetting{};
}

TEST_F(BackendConfigTest, ParsesTritonsTwoForms) {
  BackendSetting s = Parsed("python,default-hosting=stub");
  EXPECT_EQ(s.backend, "python");
  EXPECT_EQ(s.setting, "default-hosting");
  EXPECT_EQ(s.value, "stub");
  EXPECT_EQ(s.Flag(), "--backend-config=python,default-hosting=stub");
  s = Parsed("default-max-batch-size=4");
  EXPECT_EQ(s.backend, "");
  EXPECT_EQ(s.setting, "default-max-batch-size");
  EXPECT_EQ(s.value, "4");
  // The value is all after the first '=': commas and '=' included (TensorRT's plugins list).
  s = Parsed("tensorrt,plugins=/a.so;/b.so,x=y");
  EXPECT_EQ(s.backend, "tensorrt");
  EXPECT_EQ(s.setting, "plugins");
  EXPECT_EQ(s.value, "/a.so;/b.so,x=y");
  s = Parsed("key=a,b");  // '=' before the first ',': global
  EXPECT_EQ(s.backend, "");
  EXPECT_EQ(s.value, "a,b");
  s = Parsed("python,shm-default-byte-size=");  // an empty value is a value
  EXPECT_EQ(s.value, "");
}

TEST_F(BackendConfigTest, MalformedFlagsAreErrorsNamingTheFlag) {
  for (std::string_view arg : {"python", "python,default-hosting", ",default-hosting=stub",
                               "python,=stub", "=stub", ""}) {
    auto s = ParseBackendSetting(arg);
    ASSERT_FALSE(s.ok()) << arg;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr("--backend-config=" + std::string(arg) + ":"));
  }
  auto s = ParseBackendSetting("python,default-hosting=stubb");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(),
            "--backend-config=python,default-hosting=stubb: default-hosting is \"stubb\"; it "
            "takes in_process, stub or process_per_instance");
  EXPECT_FALSE(ParseBackendSetting("default-hosting=").ok());
}

TEST_F(BackendConfigTest, ABackendsOwnSettingWinsOverTheGlobalOneAndTheLastWins) {
  SetBackendSettings({Parsed("default-hosting=stub"), Parsed("python,default-hosting=in_process"),
                      Parsed("python,default-hosting=process_per_instance"),
                      Parsed("python,other=1")});
  EXPECT_EQ(BackendSettingValue("python", "default-hosting"), "process_per_instance");
  EXPECT_EQ(BackendSettingValue("pytorch", "default-hosting"), "stub");
  EXPECT_EQ(BackendSettingValue("python", "other"), "1");
  EXPECT_EQ(BackendSettingValue("pytorch", "other"), std::nullopt);
}

config::ModelConfig Config(std::string_view extra) {
  auto parsed = config::ParseModelConfigText(
      std::string("name: \"m\"\nbackend: \"python\"\n") + std::string(extra), "config.pbtxt");
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  return parsed.ok() ? parsed->config : config::ModelConfig{};
}

remote::HostingMode Mode(const config::ModelConfig& c) {
  auto h = remote::ChooseHosting(c, "python");
  EXPECT_TRUE(h.ok()) << h.status().message();
  return h.ok() ? h->mode : remote::HostingMode::kInProcess;
}

TEST_F(BackendConfigTest, DefaultHostingAppliesOnlyWhereTheConfigSaysNothing) {
  const std::string stub_param =
      "parameters { key: \"VRAMD_PYTHON_HOSTING\" value { string_value: \"stub\" } }\n";
  const std::string in_process_param =
      "parameters { key: \"VRAMD_PYTHON_HOSTING\" value { string_value: \"in_process\" } }\n";
  const std::string env_param =
      "parameters { key: \"EXECUTION_ENV_PATH\" value { string_value: \"/env.tar.gz\" } }\n";
  EXPECT_EQ(Mode(Config("")), remote::HostingMode::kInProcess);
  SetBackendSettings({Parsed("python,default-hosting=stub")});
  EXPECT_EQ(Mode(Config("")), remote::HostingMode::kStub);
  EXPECT_EQ(Mode(Config(in_process_param)), remote::HostingMode::kInProcess);
  SetBackendSettings({Parsed("python,default-hosting=process_per_instance")});
  EXPECT_EQ(Mode(Config("")), remote::HostingMode::kProcessPerInstance);
  EXPECT_EQ(Mode(Config(stub_param)), remote::HostingMode::kStub);
  EXPECT_EQ(Mode(Config(env_param)), remote::HostingMode::kProcessPerInstance);
  // in_process as the default still leaves an execution env its process.
  SetBackendSettings({Parsed("default-hosting=in_process")});
  EXPECT_EQ(Mode(Config(env_param)), remote::HostingMode::kStub);
  // Another backend's setting is not python's.
  SetBackendSettings({Parsed("pytorch,default-hosting=stub")});
  EXPECT_EQ(Mode(Config("")), remote::HostingMode::kInProcess);
}

}  // namespace
}  // namespace vramd::backends
