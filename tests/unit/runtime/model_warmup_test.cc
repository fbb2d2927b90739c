// Model warmup (runtime/model_warmup.h): the requests each model_warmup sample builds (zero,
// random and file data for FP32, INT32 and BYTES; batch_size with and without max_batch_size;
// count), the checks that reject a bad sample before anything runs, and warmup end to end
// through a LoadedModel (identity and add_sub), counted in its statistics.
#include "runtime/model_warmup.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/model_config_parser.h"
#include "core/half.h"
#include "core/tensor.h"
#include "memory/allocator.h"
#include "memory/ledger.h"
#include "runtime/loaded_model.h"

namespace vramd::runtime {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A model directory in a fresh temporary folder, removed when the test ends.
class ModelDir {
 public:
  ModelDir() {
    path_ = fs::temp_directory_path() /
            ("vramd-warmup-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    fs::remove_all(path_);
    fs::create_directories(path_ / "1");
  }
  ~ModelDir() { fs::remove_all(path_); }
  ModelDir(const ModelDir&) = delete;
  ModelDir& operator=(const ModelDir&) = delete;

  const fs::path& path() const { return path_; }

  // Writes <dir>/warmup/<name> holding `bytes`.
  void WriteWarmupFile(const std::string& name, const std::string& bytes) const {
    fs::create_directories((path_ / "warmup" / name).parent_path());
    std::ofstream(path_ / "warmup" / name, std::ios::binary) << bytes;
  }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

// Parses and normalizes `text` as model "m"; fails the test on an error.
config::ModelConfig Config(const std::string& text) {
  auto parsed = config::ParseModelConfigText(text, "config.pbtxt");
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  config::ModelConfig c = parsed.ok() ? parsed->config : config::ModelConfig();
  Status valid = config::ValidateAndNormalize(&c, "m");
  EXPECT_TRUE(valid.ok()) << valid.ToString();
  return c;
}

// An identity model with one input of `type` and `dims`, and `warmup` appended as is.
std::string IdentityConfig(int max_batch_size, const std::string& type, const std::string& dims,
                           const std::string& warmup) {
  return "name: \"m\"\nbackend: \"identity\"\nmax_batch_size: " + std::to_string(max_batch_size) +
         "\ninput [ { name: \"INPUT0\" data_type: " + type + " dims: " + dims +
         " } ]\noutput [ { name: \"OUTPUT0\" data_type: " + type + " dims: " + dims +
         " } ]\ninstance_group [ { kind: KIND_CPU count: 1 } ]\n" + warmup;
}

// One model_warmup entry with one input.
std::string Sample(const std::string& name, int batch_size, const std::string& input,
                   const std::string& type, const std::string& dims, const std::string& data,
                   int count = 0) {
  return "model_warmup [ { name: \"" + name + "\" batch_size: " + std::to_string(batch_size) +
         " count: " + std::to_string(count) + " inputs { key: \"" + input +
         "\" value { data_type: " + type + " dims: " + dims + " " + data + " } } } ]\n";
}

template <typename T>
std::vector<T> Values(const Tensor& t) {
  std::vector<T> v(t.data.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), t.data.data(), v.size() * sizeof(T));
  return v;
}

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

Result<std::vector<InferRequest>> BuildFirst(const config::ModelConfig& c, const fs::path& dir) {
  return BuildWarmupRequests(c, c.model_warmup(0), dir);
}

// --- Building requests -------------------------------------------------------------------

TEST(BuildWarmupRequestsTest, ZeroDataFp32TakesTheBatchDimension) {
  ModelDir dir;
  auto c = Config(IdentityConfig(8, "TYPE_FP32", "[ 3 ]",
                                 Sample("zeros", 2, "INPUT0", "TYPE_FP32", "[ 3 ]", "zero_data: true")));
  auto requests = BuildFirst(c, dir.path());
  ASSERT_TRUE(requests.ok()) << requests.status().ToString();
  ASSERT_EQ(requests->size(), 1u);  // the whole batch in one request
  const InferRequest& r = (*requests)[0];
  EXPECT_EQ(r.model_name, "m");
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_EQ(r.inputs[0].name, "INPUT0");
  EXPECT_EQ(r.inputs[0].datatype, DataType::kFp32);
  EXPECT_EQ(r.inputs[0].shape, (Shape{2, 3}));
  EXPECT_EQ(Values<float>(r.inputs[0]), std::vector<float>(6, 0.0f));
}

TEST(BuildWarmupRequestsTest, ASequenceModelRunsEachBatchElementAsASequenceOfItsOwn) {
  ModelDir dir;
  // As Triton samples for sequence models do, the sample lists the control input too.
  const std::string sample =
      "model_warmup [ { name: \"seq\" batch_size: 3 inputs { key: \"INPUT0\" value { "
      "data_type: TYPE_FP32 dims: [ 2 ] zero_data: true } } inputs { key: \"START\" value { "
      "data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } } ]\n"
      "sequence_batching { control_input [ { name: \"START\" control [ { kind: "
      "CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ] }\n";
  auto c = Config(IdentityConfig(4, "TYPE_FP32", "[ 2 ]", sample));
  auto requests = BuildFirst(c, dir.path());
  ASSERT_TRUE(requests.ok()) << requests.status().ToString();
  ASSERT_EQ(requests->size(), 3u);  // the sequence batcher takes batch 1 only
  for (const InferRequest& r : *requests) {
    ASSERT_EQ(r.inputs.size(), 1u);  // START is the batcher's to fill
    EXPECT_EQ(r.inputs[0].shape, (Shape{1, 2}));
    EXPECT_EQ(r.flags, kRequestFlagSequenceStart | kRequestFlagSequenceEnd);
    EXPECT_EQ(r.correlation_id, kWarmupCorrelationId);
  }
}

TEST(BuildWarmupRequestsTest, ZeroDataBytesIsEmptyStrings) {
  ModelDir dir;
  auto c = Config(IdentityConfig(0, "TYPE_STRING", "[ 2 ]",
                                 Sample("s", 1, "INPUT0", "TYPE_STRING", "[ 2 ]", "zero_data: true")));
  auto requests = BuildFirst(c, dir.path());
  ASSERT_TRUE(requests.ok()) << requests.status().ToString();
  ASSERT_EQ(requests->size(), 1u);
  const Tensor& t = (*requests)[0].inputs[0];
  EXPECT_EQ(t.datatype, DataType::kBytes);
  EXPECT_EQ(t.shape, (Shape{2}));  // no batch dimension without max_batch_size
  auto elements = SplitBytesElements(t.data.view(), t.name, 2);
  ASSERT_TRUE(elements.ok()) << elements.status().ToString();
  EXPECT_EQ((*elements)[0], "");
  EXPECT_EQ((*elements)[1], "");
}

TEST(BuildWarmupRequestsTest, ZeroDataFalseStillMeansZeroData) {
  // Triton reads which member of the oneof is set, not its value.
  ModelDir dir;
  auto c = Config(IdentityConfig(0, "TYPE_INT32", "[ 2 ]",
                                 Sample("z", 1, "INPUT0", "TYPE_INT32", "[ 2 ]", "zero_data: false")));
  auto requests = BuildFirst(c, dir.path());
  ASSERT_TRUE(requests.ok()) << requests.status().ToString();
  EXPECT_EQ(Values<int32_t>((*requests)[0].inputs[0]), (std::vector<int32_t>{0, 0}));
}

TEST(BuildWarmupRequestsTest, RandomFp32IsInUnitRangeDuplicatedPerBatchAndReproducible) {
  ModelDir dir;
  auto c = Config(IdentityConfig(4, "TYPE_FP32", "[ 16 ]",
                                 Sample("r", 3, "INPUT0", "TYPE_FP32", "[ 16 ]", "random_data: true")));
  auto first = BuildFirst(c, dir.path());
  auto second = BuildFirst(c, dir.path());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(second.ok());
  const Tensor& t = (*first)[0].inputs[0];
  EXPECT_EQ(t.shape, (Shape{3, 16}));
  const auto v = Values<float>(t);
  ASSERT_EQ(v.size(), 48u);
  for (float f : v) {
    EXPECT_GE(f, 0.0f);
    EXPECT_LT(f, 1.0f);
  }
  // One batch element, repeated batch_size times ("inputs duplicated to match the batch size").
  const std::vector<float> element(v.begin(), v.begin() + 16);
  EXPECT_EQ(std::vector<float>(v.begin() + 16, v.begin() + 32), element);
  EXPECT_EQ(std::vector<float>(v.begin() + 32, v.end()), element);
  EXPECT_NE(element[0], element[1]);  // random, not constant
  // The same values on every build: a failing warmup reproduces.
  EXPECT_EQ((*second)[0].inputs[0].data.view(), t.data.view());
}

TEST(BuildWarmupRequestsTest, RandomBoolIsZeroOrOneAndRandomFp16IsBelowOne) {
  ModelDir dir;
  auto c = Config(
      "name: \"m\"\nbackend: \"identity\"\n"
      "input [ { name: \"INPUT0\" data_type: TYPE_BOOL dims: [ 64 ] },"
      "        { name: \"INPUT1\" data_type: TYPE_FP16 dims: [ 64 ] } ]\n"
      "output [ { name: \"OUTPUT0\" data_type: TYPE_BOOL dims: [ 64 ] },"
      "         { name: \"OUTPUT1\" data_type: TYPE_FP16 dims: [ 64 ] } ]\n"
      "model_warmup [ { name: \"r\" batch_size: 1 inputs [\n"
      "  { key: \"INPUT0\" value { data_type: TYPE_BOOL dims: [ 64 ] random_data: true } },\n"
      "  { key: \"INPUT1\" value { data_type: TYPE_FP16 dims: [ 64 ] random_data: true } } ] } ]\n");
  auto requests = BuildFirst(c, dir.path());
  ASSERT_TRUE(requests.ok()) << requests.status().ToString();
  const auto& inputs = (*requests)[0].inputs;
  ASSERT_EQ(inputs.size(), 2u);
  EXPECT_EQ(inputs[0].name, "INPUT0");  // config order
  int ones = 0;
  for (uint8_t b : Values<uint8_t>(inputs[0])) {
    EXPECT_LE(b, 1);
    ones += b;
  }
  EXPECT_GT(ones, 0);
  EXPECT_LT(ones, 64);
  for (uint16_t h : Values<uint16_t>(inputs[1])) {
    EXPECT_GE(HalfToFloat(h), 0.0f);
    EXPECT_LT(HalfToFloat(h), 1.0f);
  }
}

TEST(BuildWarmupRequestsTest, RandomDataBytesFallsBackToZeroData) {
  ModelDir dir;
  auto c = Config(IdentityConfig(0, "TYPE_STRING", "[ 3 ]",
                                 Sample("s", 1, "INPUT0", "TYPE_STRING", "[ 3 ]", "random_data: true")));
  auto requests = BuildFirst(c, dir.path());
  ASSERT_TRUE(requests.ok()) << requests.status().ToString();
  EXPECT_EQ((*requests)[0].inputs[0].data.view(), std::string(12, '\0'));
}

TEST(BuildWarmupRequestsTest, Int32FileIsOneBatchElementRepeated) {
  ModelDir dir;
  dir.WriteWarmupFile("in0.bin", Bytes(std::vector<int32_t>{1, -2, 3, 4}));
  auto c = Config(IdentityConfig(4, "TYPE_INT32", "[ 2, 2 ]",
                                 Sample("f", 2, "INPUT0", "TYPE_INT32", "[ 2, 2 ]",
                                        "input_data_file: \"in0.bin\"")));
  auto requests = BuildFirst(c, dir.path());
  ASSERT_TRUE(requests.ok()) << requests.status().ToString();
  const Tensor& t = (*requests)[0].inputs[0];
  EXPECT_EQ(t.shape, (Shape{2, 2, 2}));
  EXPECT_EQ(Values<int32_t>(t), (std::vector<int32_t>{1, -2, 3, 4, 1, -2, 3, 4}));
}

TEST(BuildWarmupRequestsTest, Fp32FileInASubfolderAndLongerThanNeededUsesItsPrefix) {
  // Triton accepts a file longer than one element and reads its first bytes.
  ModelDir dir;
  dir.WriteWarmupFile("sub/in0.bin", Bytes(std::vector<float>{0.5f, 1.5f, 9.0f}));
  auto c = Config(IdentityConfig(0, "TYPE_FP32", "[ 2 ]",
                                 Sample("f", 1, "INPUT0", "TYPE_FP32", "[ 2 ]",
                                        "input_data_file: \"sub/in0.bin\"")));
  auto requests = BuildFirst(c, dir.path());
  ASSERT_TRUE(requests.ok()) << requests.status().ToString();
  EXPECT_EQ(Values<float>((*requests)[0].inputs[0]), (std::vector<float>{0.5f, 1.5f}));
}

TEST(BuildWarmupRequestsTest, BytesFileHoldsLengthPrefixedElements) {
  ModelDir dir;
  std::string serialized;
  AppendBytesElement(&serialized, "hello");
  AppendBytesElement(&serialized, "");
  dir.WriteWarmupFile("strings.bin", serialized);
  auto c = Config(IdentityConfig(2, "TYPE_STRING", "[ 2 ]",
                                 Sample("f", 2, "INPUT0", "TYPE_STRING", "[ 2 ]",
                                        "input_data_file: \"strings.bin\"")));
  auto requests = BuildFirst(c, dir.path());
  ASSERT_TRUE(requests.ok()) << requests.status().ToString();
  const Tensor& t = (*requests)[0].inputs[0];
  EXPECT_EQ(t.shape, (Shape{2, 2}));
  auto elements = SplitBytesElements(t.data.view(), t.name, 4);
  ASSERT_TRUE(elements.ok()) << elements.status().ToString();
  EXPECT_EQ((*elements)[0], "hello");
  EXPECT_EQ((*elements)[1], "");
  EXPECT_EQ((*elements)[2], "hello");
  EXPECT_EQ((*elements)[3], "");
}

TEST(BuildWarmupRequestsTest, WithoutBatchingBatchSizeGivesThatManyRequests) {
  ModelDir dir;
  auto c = Config(IdentityConfig(0, "TYPE_INT32", "[ 2 ]",
                                 Sample("z", 3, "INPUT0", "TYPE_INT32", "[ 2 ]", "zero_data: true")));
  auto requests = BuildFirst(c, dir.path());
  ASSERT_TRUE(requests.ok()) << requests.status().ToString();
  ASSERT_EQ(requests->size(), 3u);
  for (const auto& r : *requests) EXPECT_EQ(r.inputs[0].shape, (Shape{2}));
}

TEST(BuildWarmupRequestsTest, BatchSizeZeroIsSkippedWithoutChecks) {
  // Triton skips a batch_size 0 sample; nothing in it is read, even an unknown input.
  ModelDir dir;
  auto c = Config(IdentityConfig(4, "TYPE_INT32", "[ 2 ]",
                                 Sample("skip", 0, "NOPE", "TYPE_INT32", "[ 2 ]",
                                        "input_data_file: \"missing.bin\"")));
  auto requests = BuildFirst(c, dir.path());
  ASSERT_TRUE(requests.ok()) << requests.status().ToString();
  EXPECT_TRUE(requests->empty());
}

TEST(BuildWarmupRequestsTest, CountZeroRunsOnceOtherwiseCountTimes) {
  config::ModelWarmup sample;
  EXPECT_EQ(WarmupIterations(sample), 1u);
  sample.set_count(1);
  EXPECT_EQ(WarmupIterations(sample), 1u);
  sample.set_count(5);
  EXPECT_EQ(WarmupIterations(sample), 5u);
}

TEST(BuildWarmupRequestsTest, OptionalInputMayBeLeftOut) {
  ModelDir dir;
  auto c = Config(
      "name: \"m\"\nbackend: \"identity\"\n"
      "input [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ 2 ] },"
      "        { name: \"INPUT1\" data_type: TYPE_INT32 dims: [ 2 ] optional: true } ]\n"
      "output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ 2 ] },"
      "         { name: \"OUTPUT1\" data_type: TYPE_INT32 dims: [ 2 ] } ]\n" +
      Sample("z", 1, "INPUT0", "TYPE_INT32", "[ 2 ]", "zero_data: true"));
  auto requests = BuildFirst(c, dir.path());
  ASSERT_TRUE(requests.ok()) << requests.status().ToString();
  EXPECT_EQ((*requests)[0].inputs.size(), 1u);
}

// --- Rejected samples --------------------------------------------------------------------

// The error BuildWarmupRequests gives for the one-input identity sample with `data`.
Status SampleError(int max_batch_size, const std::string& type, const std::string& config_dims,
                   int batch_size, const std::string& input, const std::string& sample_dims,
                   const std::string& data, const ModelDir& dir) {
  auto c = Config(IdentityConfig(max_batch_size, type, config_dims,
                                 Sample("bad", batch_size, input, type, sample_dims, data)));
  auto requests = BuildFirst(c, dir.path());
  EXPECT_FALSE(requests.ok());
  return requests.status();
}

TEST(WarmupRejectsTest, MissingFileNamesTheFile) {
  ModelDir dir;
  Status s = SampleError(0, "TYPE_FP32", "[ 2 ]", 1, "INPUT0", "[ 2 ]",
                         "input_data_file: \"nope.bin\"", dir);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("model 'm': warmup sample 'bad': input 'INPUT0'"));
  EXPECT_THAT(s.message(), HasSubstr("'nope.bin' not found"));
  EXPECT_THAT(s.message(), HasSubstr((dir.path() / "warmup" / "nope.bin").string()));
}

TEST(WarmupRejectsTest, ShortFileGivesExpectedAndActualSizes) {
  ModelDir dir;
  dir.WriteWarmupFile("short.bin", Bytes(std::vector<float>{1.0f, 2.0f, 3.0f}));
  Status s = SampleError(0, "TYPE_FP32", "[ 4 ]", 1, "INPUT0", "[ 4 ]",
                         "input_data_file: \"short.bin\"", dir);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("input 'INPUT0'"));
  EXPECT_THAT(s.message(), HasSubstr("short.bin' has 12 bytes, expected 16"));
}

TEST(WarmupRejectsTest, BytesFileWithTheWrongElementCount) {
  ModelDir dir;
  std::string serialized;
  AppendBytesElement(&serialized, "only one");
  dir.WriteWarmupFile("s.bin", serialized);
  Status s = SampleError(0, "TYPE_STRING", "[ 2 ]", 1, "INPUT0", "[ 2 ]",
                         "input_data_file: \"s.bin\"", dir);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("s.bin' does not hold 2 TYPE_STRING element(s)"));
}

TEST(WarmupRejectsTest, PathsMayNotLeaveTheWarmupFolder) {
  ModelDir dir;
  fs::create_directories(dir.path() / "warmup");
  std::ofstream(dir.path() / "secret.bin") << "12345678";
  for (const char* file : {"../secret.bin", "/etc/passwd", ""}) {
    Status s = SampleError(0, "TYPE_FP32", "[ 2 ]", 1, "INPUT0", "[ 2 ]",
                           std::string("input_data_file: \"") + file + "\"", dir);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << file;
    EXPECT_THAT(s.message(), HasSubstr("input 'INPUT0': input_data_file")) << file;
  }
}

TEST(WarmupRejectsTest, SymlinksOutOfTheWarmupFolderAndFifosAreRefused) {
  // The same rule as label_filename (runtime/model_file.h): resolved inside warmup/, a regular
  // file; a FIFO is refused without being opened (opening it would block the load).
  ModelDir dir;
  fs::create_directories(dir.path() / "warmup");
  std::ofstream(dir.path() / "secret.bin") << "12345678";
  fs::create_symlink(dir.path() / "secret.bin", dir.path() / "warmup" / "out.bin");
  ASSERT_EQ(::mkfifo((dir.path() / "warmup" / "fifo.bin").c_str(), 0600), 0);
  const std::pair<const char*, const char*> cases[] = {
      {"out.bin", "outside the model's warmup/ folder"},
      {"fifo.bin", "is a FIFO, not a regular file"}};
  for (const auto& [file, why] : cases) {
    Status s = SampleError(0, "TYPE_FP32", "[ 2 ]", 1, "INPUT0", "[ 2 ]",
                           std::string("input_data_file: \"") + file + "\"", dir);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << file;
    EXPECT_THAT(s.message(), HasSubstr(std::string("input 'INPUT0': input_data_file '") + file));
    EXPECT_THAT(s.message(), HasSubstr(why));
  }
}

TEST(WarmupRejectsTest, UnknownInput) {
  ModelDir dir;
  Status s = SampleError(0, "TYPE_FP32", "[ 2 ]", 1, "INPUT9", "[ 2 ]", "zero_data: true", dir);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("warmup sample 'bad': input 'INPUT9': not an input of the model "
                        "(inputs: INPUT0)"));
}

TEST(WarmupRejectsTest, MissingInput) {
  ModelDir dir;
  auto c = Config(
      "name: \"m\"\nbackend: \"add_sub\"\n"
      "input [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ 4 ] },"
      "        { name: \"INPUT1\" data_type: TYPE_INT32 dims: [ 4 ] } ]\n"
      "output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ 4 ] } ]\n" +
      Sample("half", 1, "INPUT0", "TYPE_INT32", "[ 4 ]", "zero_data: true"));
  auto requests = BuildFirst(c, dir.path());
  ASSERT_FALSE(requests.ok());
  EXPECT_EQ(requests.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(requests.status().message(),
              HasSubstr("warmup sample 'half': input 'INPUT1': missing"));
}

TEST(WarmupRejectsTest, DataTypeThatDiffersFromTheModelInput) {
  ModelDir dir;
  auto c = Config(IdentityConfig(0, "TYPE_FP32", "[ 2 ]",
                                 Sample("t", 1, "INPUT0", "TYPE_INT32", "[ 2 ]", "zero_data: true")));
  auto requests = BuildFirst(c, dir.path());
  ASSERT_FALSE(requests.ok());
  EXPECT_THAT(requests.status().message(),
              HasSubstr("input 'INPUT0': data_type TYPE_INT32 does not match the model input's "
                        "TYPE_FP32"));
}

TEST(WarmupRejectsTest, VariableSizeDimension) {
  ModelDir dir;
  Status s = SampleError(0, "TYPE_FP32", "[ -1 ]", 1, "INPUT0", "[ -1 ]", "zero_data: true", dir);
  EXPECT_THAT(s.message(), HasSubstr("input 'INPUT0': dims [-1] has a variable-size dimension"));
}

TEST(WarmupRejectsTest, NoDataChoice) {
  ModelDir dir;
  Status s = SampleError(0, "TYPE_FP32", "[ 2 ]", 1, "INPUT0", "[ 2 ]", "", dir);
  EXPECT_THAT(s.message(),
              HasSubstr("input 'INPUT0': none of zero_data, random_data and input_data_file"));
}

TEST(WarmupRejectsTest, DimsThatDoNotFitTheConfig) {
  // What Infer's validation would reject comes back here, before anything runs.
  ModelDir dir;
  Status s = SampleError(4, "TYPE_FP32", "[ 4 ]", 1, "INPUT0", "[ 3 ]", "zero_data: true", dir);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("model 'm': warmup sample 'bad': input 'INPUT0': shape "
                                     "[1,3] does not match dims [4]"));
}

TEST(WarmupRejectsTest, BatchSizeAboveMaxBatchSize) {
  ModelDir dir;
  Status s = SampleError(2, "TYPE_FP32", "[ 2 ]", 3, "INPUT0", "[ 2 ]", "zero_data: true", dir);
  EXPECT_THAT(s.message(), HasSubstr("warmup sample 'bad': batch_size 3 exceeds max_batch_size 2"));
}

TEST(WarmupRejectsTest, DataOverTheSizeLimit) {
  ModelDir dir;
  Status s = SampleError(0, "TYPE_FP32", "[ -1, -1 ]", 1, "INPUT0", "[ 100000, 100000 ]",
                         "zero_data: true", dir);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("exceed the warmup limit"));
}

// --- End to end through a LoadedModel ----------------------------------------------------

class RunModelWarmupTest : public ::testing::Test {
 protected:
  std::shared_ptr<LoadedModel> Load(const std::string& text, const ModelDir& dir) {
    auto config = std::make_shared<config::ModelConfig>(Config(text));
    auto model = LoadedModel::Load(config, dir.path(), 1, {&ledger_, &allocator_, nullptr},
                                   model_owner_.id());
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    return model.ok() ? *model : nullptr;
  }

  memory::Ledger ledger_;
  memory::Allocator allocator_{&ledger_};
  memory::ScopedOwner model_owner_{&ledger_, memory::kNoOwner, memory::OwnerKind::kModel, "m"};
};

TEST_F(RunModelWarmupTest, RunsEverySampleCountTimesAndStatisticsCountThem) {
  ModelDir dir;
  dir.WriteWarmupFile("in0.bin", Bytes(std::vector<int32_t>{7, 8, 9}));
  const std::string warmup =
      "model_warmup [\n"
      "  { name: \"zeros\" batch_size: 2 count: 3 inputs { key: \"INPUT0\" value {"
      "      data_type: TYPE_INT32 dims: [ 3 ] zero_data: true } } },\n"
      "  { name: \"file\" batch_size: 1 inputs { key: \"INPUT0\" value {"
      "      data_type: TYPE_INT32 dims: [ 3 ] input_data_file: \"in0.bin\" } } },\n"
      "  { name: \"unset batch\" inputs { key: \"INPUT0\" value {"
      "      data_type: TYPE_INT32 dims: [ 3 ] zero_data: true } } } ]\n";
  auto model = Load(IdentityConfig(4, "TYPE_INT32", "[ -1 ]", warmup), dir);
  ASSERT_NE(model, nullptr);

  ASSERT_TRUE(ValidateModelWarmup(model->config(), dir.path()).ok());
  Status s = RunModelWarmup(*model, dir.path());
  ASSERT_TRUE(s.ok()) << s.ToString();

  // Warmup requests are counted like any other, as Triton counts them: "zeros" 3 executions
  // of batch 2, "file" one of batch 1, the batch_size 0 sample none.
  const auto stats = model->statistics().Snapshot();
  EXPECT_EQ(stats.success.count, 4u);
  EXPECT_EQ(stats.fail.count, 0u);
  EXPECT_EQ(stats.execution_count, 4u);
  EXPECT_EQ(stats.inference_count, 3u * 2 + 1);
  EXPECT_EQ(stats.pending, 0);
}

TEST_F(RunModelWarmupTest, NoSamplesIsOkAndRunsNothing) {
  ModelDir dir;
  auto model = Load(IdentityConfig(4, "TYPE_INT32", "[ -1 ]", ""), dir);
  ASSERT_NE(model, nullptr);
  EXPECT_TRUE(RunModelWarmup(*model, dir.path()).ok());
  EXPECT_EQ(model->statistics().Snapshot().execution_count, 0u);
}

TEST_F(RunModelWarmupTest, BackendErrorComesBackAsIsWithTheSampleName) {
  // Both add_sub inputs are [-1], so [4] and [3] pass validation; add_sub then refuses
  // inputs of different shapes at Execute.
  ModelDir dir;
  const std::string text =
      "name: \"m\"\nbackend: \"add_sub\"\n"
      "input [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ -1 ] },"
      "        { name: \"INPUT1\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
      "output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
      "model_warmup [ { name: \"mismatch\" batch_size: 1 count: 2 inputs [\n"
      "  { key: \"INPUT0\" value { data_type: TYPE_INT32 dims: [ 4 ] zero_data: true } },\n"
      "  { key: \"INPUT1\" value { data_type: TYPE_INT32 dims: [ 3 ] zero_data: true } } ] } ]\n";
  auto model = Load(text, dir);
  ASSERT_NE(model, nullptr);
  Status s = RunModelWarmup(*model, dir.path());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);  // the backend's code, kept
  EXPECT_THAT(s.message(), HasSubstr("warmup sample 'mismatch' iteration 1 of 2: model 'm' "
                                     "version 1: "));
  EXPECT_THAT(s.message(), HasSubstr("INPUT0 shape [4] and INPUT1 shape [3] differ"));
  // The first failure stops the warmup.
  const auto stats = model->statistics().Snapshot();
  EXPECT_EQ(stats.fail.count, 1u);
  EXPECT_EQ(stats.success.count, 0u);
}

TEST_F(RunModelWarmupTest, ABadSampleFailsBeforeAnySampleRuns) {
  ModelDir dir;
  const std::string text =
      "name: \"m\"\nbackend: \"add_sub\"\n"
      "input [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ 4 ] },"
      "        { name: \"INPUT1\" data_type: TYPE_INT32 dims: [ 4 ] } ]\n"
      "output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ 4 ] } ]\n"
      "model_warmup [\n"
      "  { name: \"good\" batch_size: 1 inputs [\n"
      "    { key: \"INPUT0\" value { data_type: TYPE_INT32 dims: [ 4 ] zero_data: true } },\n"
      "    { key: \"INPUT1\" value { data_type: TYPE_INT32 dims: [ 4 ] random_data: true } } ] },\n"
      "  { name: \"wrong dims\" batch_size: 1 inputs [\n"
      "    { key: \"INPUT0\" value { data_type: TYPE_INT32 dims: [ 3 ] zero_data: true } },\n"
      "    { key: \"INPUT1\" value { data_type: TYPE_INT32 dims: [ 3 ] zero_data: true } } ] } ]\n";
  auto model = Load(text, dir);
  ASSERT_NE(model, nullptr);
  Status s = RunModelWarmup(*model, dir.path());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("model 'm': warmup sample 'wrong dims': input 'INPUT0': "
                                     "shape [3] does not match dims [4]"));
  EXPECT_EQ(ValidateModelWarmup(model->config(), dir.path()).message(), s.message());
  EXPECT_EQ(model->statistics().Snapshot().execution_count, 0u);  // "good" did not run either
}

}  // namespace
}  // namespace vramd::runtime
