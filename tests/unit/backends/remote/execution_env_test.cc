// EXECUTION_ENV_PATH for hosted models (remote/execution_env.h): the library's Python read from
// its DT_NEEDED, an env of another Python refused naming both versions, a .tar.gz unpacked into
// a private directory that goes with the ExecutionEnv.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "backends/remote/execution_env.h"

namespace vramd::backends::remote {
namespace {
namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kPythonLibrary = fs::path(VRAMD_SOURCE_DIR) / "build/backends/python/libvramd_python.so";
const fs::path kEchoLibrary = fs::path(VRAMD_TEST_BACKENDS_DIR) / "echo_c/libvramd_echo_c.so";

fs::path FakeEnv(const std::string& python) {
  const fs::path root = fs::path(::testing::TempDir()) / ("env-" + python + "-" + std::to_string(::getpid()));
  fs::create_directories(root / "lib" / ("python" + python));
  std::ofstream(root / "lib" / ("python" + python) / "os.py") << "# stdlib\n";
  fs::create_directories(root / "bin");
  return root;
}

TEST(ExecutionEnvTest, ReadsTheLibrarysPython) {
  auto echo = LibraryPythonVersion(kEchoLibrary);
  ASSERT_TRUE(echo.ok()) << echo.status().ToString();
  EXPECT_FALSE(echo->has_value());
  if (!fs::exists(kPythonLibrary)) GTEST_SKIP() << "no python backend built at " << kPythonLibrary;
  auto python = LibraryPythonVersion(kPythonLibrary);
  ASSERT_TRUE(python.ok()) << python.status().ToString();
  ASSERT_TRUE(python->has_value());
  EXPECT_THAT(**python, ::testing::MatchesRegex("3\\.[0-9]+"));
}

TEST(ExecutionEnvTest, AnotherPythonIsRefusedNamingBoth) {
  if (!fs::exists(kPythonLibrary)) GTEST_SKIP() << "no python backend built";
  const fs::path env = FakeEnv("3.99");
  auto prepared = ExecutionEnv::Prepare(env.string(), "/models/m", kPythonLibrary);
  ASSERT_FALSE(prepared.ok());
  EXPECT_EQ(prepared.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(prepared.status().message(), HasSubstr("has Python 3.99"));
  EXPECT_THAT(prepared.status().message(), HasSubstr("built against Python 3."));
  fs::remove_all(env);
}

TEST(ExecutionEnvTest, ATarGzIsUnpackedPrivatelyAndRemoved) {
  const fs::path env = FakeEnv("3.11");
  const fs::path archive = fs::path(::testing::TempDir()) / ("env-" + std::to_string(::getpid()) + ".tar.gz");
  const std::string tar = "tar -czf " + archive.string() + " -C " + env.string() + " .";
  ASSERT_EQ(std::system(tar.c_str()), 0);
  fs::path root;
  {
    auto prepared = ExecutionEnv::Prepare("$$TRITON_MODEL_DIRECTORY/" + archive.filename().string(),
                                          archive.parent_path(), kEchoLibrary);
    ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
    root = (*prepared)->root();
    EXPECT_TRUE(fs::exists(root / "lib/python3.11/os.py"));
    const auto vars = (*prepared)->Environment();
    ASSERT_EQ(vars.size(), 3u);
    EXPECT_THAT(vars[0], HasSubstr("PATH=" + (root / "bin").string()));
    EXPECT_EQ(vars[1], "PYTHONHOME=" + root.string());
  }
  EXPECT_FALSE(fs::exists(root)) << "the unpacked env outlived its model";
  auto missing = ExecutionEnv::Prepare("/nowhere/env.zip", "/m", kEchoLibrary);
  EXPECT_THAT(missing.status().message(), HasSubstr("neither a directory nor a .tar.gz"));
  fs::remove_all(env);
  fs::remove(archive);
}

}  // namespace
}  // namespace vramd::backends::remote
