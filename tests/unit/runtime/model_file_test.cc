// Tests for runtime/model_file.h: the rule for files a config names, and reading them.
#include "runtime/model_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "support/scratch_repository.h"

namespace vramd::runtime {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr ModelFileRule kRule{.field = "label_filename", .folder = "the model directory",
                              .max_bytes = 100};

class ModelFileTest : public ::testing::Test {
 protected:
  ModelFileTest() : model_(scratch_.root() / "m") {
    fs::create_directories(model_ / "sub");
    Write(model_ / "labels.txt", "cat\ndog\n");
    Write(model_ / "sub" / "deeper.txt", "x");
    Write(scratch_.root() / "secret.txt", "secret\n");
  }

  static void Write(const fs::path& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }

  // The refusal for `relative`, which must be an InvalidArgument naming the field and the path.
  std::string Refusal(const std::string& relative) const {
    auto file = ResolveModelFile(model_, relative, kRule);
    EXPECT_FALSE(file.ok()) << relative;
    if (file.ok()) return "";
    EXPECT_EQ(file.status().code(), StatusCode::kInvalidArgument) << file.status().ToString();
    EXPECT_THAT(file.status().message(), HasSubstr("label_filename '" + relative + "'"));
    return file.status().message();
  }

  vramd::testing::ScratchRepository scratch_;
  fs::path model_;
};

TEST_F(ModelFileTest, AFileInsideTheFolderResolvesAndReads) {
  for (const char* relative :
       {"labels.txt", "./labels.txt", "sub/deeper.txt", "sub//deeper.txt"}) {
    auto file = ResolveModelFile(model_, relative, kRule);
    ASSERT_TRUE(file.ok()) << relative << ": " << file.status().ToString();
    EXPECT_EQ(file->path, fs::canonical(model_ / relative));
  }
  auto file = ResolveModelFile(model_, "labels.txt", kRule);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->size, 8u);
  auto text = ReadModelFile(*file, 8, kRule);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "cat\ndog\n");
  auto prefix = ReadModelFile(*file, 3, kRule);
  ASSERT_TRUE(prefix.ok());
  EXPECT_EQ(*prefix, "cat");
}

TEST_F(ModelFileTest, AbsolutePathsAreRefused) {
  EXPECT_THAT(Refusal((scratch_.root() / "secret.txt").string()),
              HasSubstr("must be a path relative to the model directory"));
  EXPECT_THAT(Refusal("/dev/zero"), HasSubstr("must be a path relative to"));
  EXPECT_THAT(Refusal((model_ / "labels.txt").string()), HasSubstr("relative"));
}

TEST_F(ModelFileTest, DotDotIsRefusedEvenWhenItComesBackInside) {
  EXPECT_THAT(Refusal("../secret.txt"), HasSubstr("must not leave the model directory (\"..\")"));
  EXPECT_THAT(Refusal("sub/../../secret.txt"), HasSubstr("\"..\""));
  EXPECT_THAT(Refusal("sub/../labels.txt"), HasSubstr("\"..\""));
}

TEST_F(ModelFileTest, SymlinksOutOfTheFolderAreRefused) {
  fs::create_symlink(scratch_.root() / "secret.txt", model_ / "escape.txt");
  fs::create_directory_symlink(scratch_.root(), model_ / "up");
  fs::create_symlink("/dev/zero", model_ / "zero.txt");
  EXPECT_THAT(Refusal("escape.txt"), HasSubstr("outside the model directory"));
  EXPECT_THAT(Refusal("up/secret.txt"), HasSubstr("outside the model directory"));
  EXPECT_THAT(Refusal("zero.txt"), HasSubstr("resolves to '/dev/zero', outside"));
  // A symlink that stays inside is fine.
  fs::create_symlink("sub/deeper.txt", model_ / "alias.txt");
  EXPECT_TRUE(ResolveModelFile(model_, "alias.txt", kRule).ok());
}

TEST_F(ModelFileTest, TheFolderItselfMayBeASymlink) {
  // Repositories are often symlinked (e.g. a mounted volume): the rule compares resolved paths.
  fs::create_directory_symlink(model_, scratch_.root() / "linked");
  auto file = ResolveModelFile(scratch_.root() / "linked", "labels.txt", kRule);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_FALSE(ResolveModelFile(scratch_.root() / "linked", "../secret.txt", kRule).ok());
}

TEST_F(ModelFileTest, FifosDevicesAndFoldersAreRefusedWithoutBeingOpened) {
  ASSERT_EQ(::mkfifo((model_ / "fifo").c_str(), 0600), 0);
  // Opening the FIFO for reading would block this test forever: the refusal must come first.
  EXPECT_THAT(Refusal("fifo"), HasSubstr("is a FIFO, not a regular file"));
  EXPECT_THAT(Refusal("sub"), HasSubstr("is a directory, not a regular file"));
}

TEST_F(ModelFileTest, MissingFilesNameThePath) {
  EXPECT_THAT(Refusal("nope.txt"),
              HasSubstr("not found: no file '" + (model_ / "nope.txt").string()));
  EXPECT_EQ(ResolveModelFile(model_, "", kRule).status().message(), "label_filename is empty");
}

TEST_F(ModelFileTest, FilesOverTheLimitAreRefusedBeforeReading) {
  Write(model_ / "big.txt", std::string(101, 'x'));
  Write(model_ / "exact.txt", std::string(100, 'x'));
  EXPECT_THAT(Refusal("big.txt"), HasSubstr("has 101 bytes, over the limit of 100 bytes"));
  EXPECT_TRUE(ResolveModelFile(model_, "exact.txt", kRule).ok());
}

TEST_F(ModelFileTest, AFileSwappedForAFifoAfterResolvingIsRefusedNotWaitedOn) {
  auto file = ResolveModelFile(model_, "labels.txt", kRule);
  ASSERT_TRUE(file.ok());
  fs::remove(model_ / "labels.txt");
  ASSERT_EQ(::mkfifo((model_ / "labels.txt").c_str(), 0600), 0);
  auto text = ReadModelFile(*file, 8, kRule);
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(text.status().message(), HasSubstr("no longer a regular file"));
}

TEST_F(ModelFileTest, AFileThatShrankIsAnError) {
  auto file = ResolveModelFile(model_, "labels.txt", kRule);
  ASSERT_TRUE(file.ok());
  Write(model_ / "labels.txt", "cat");
  auto text = ReadModelFile(*file, 8, kRule);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kInternal);
  EXPECT_THAT(text.status().message(), HasSubstr("3 bytes now, 8 expected"));
}

}  // namespace
}  // namespace vramd::runtime
