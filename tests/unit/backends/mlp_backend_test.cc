// The built-in mlp backend on the CPU: outputs equal an independent reference (a naive triple
// loop in double, written here), for FP32 and FP16 weights and batch sizes 1 and max; load
// errors name the tensor or config field; the weights are loaded once and shared by every
// instance, as the ledger shows; a load records its file_read and host_stage phases, and stages
// a GPU image in pinned memory where there is a GPU (ordinary host memory, silently, where
// not); the example model matches the numpy reference that scripts/make_mlp_model.py wrote.
#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "backends/mlp/mlp_plan.h"
#include "backends/mlp/safetensors.h"
#include "backends/mlp/safetensors_writer.h"
#include "core/half.h"
#include "core/load_timing.h"
#include "memory/allocator.h"
#include "memory/cuda_devices.h"
#include "memory/ledger.h"
#include "support/mlp_reference.h"

namespace vramd::backends {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using safetensors::Dtype;
using safetensors::TensorToWrite;

// Tolerance for FP32 math against the double reference: |got - want| <= kRelTol * max(1, |want|).
// Both FP32 and FP16 files are computed in FP32 on the CPU (FP16 weights are widened exactly),
// and the reference uses the same (FP16-rounded) weights, so one tolerance serves both.
constexpr double kRelTol = 1e-5;

// Weights of an MLP, held as floats (FP16 ones already rounded to FP16).
using Weights = vramd::testing::MlpWeights;
using vramd::testing::EncodeWeights;
using vramd::testing::MlpReference;
using vramd::testing::MlpTensors;
using vramd::testing::RandomMlpInput;

Weights RandomWeights(std::vector<int64_t> widths, bool fp16, uint32_t seed) {
  return vramd::testing::RandomMlpWeights(std::move(widths), seed, 0.1f, fp16);
}

std::string Config(const std::string& name, int64_t k, int64_t n, int max_batch,
                   const std::string& extra = "instance_group [ { kind: KIND_CPU count: 1 } ]") {
  return "name: \"" + name + "\"\nbackend: \"mlp\"\nmax_batch_size: " + std::to_string(max_batch) +
         "\ninput [ { name: \"INPUT0\" data_type: TYPE_FP32 dims: [ " + std::to_string(k) +
         " ] } ]\noutput [ { name: \"OUTPUT0\" data_type: TYPE_FP32 dims: [ " +
         std::to_string(n) + " ] } ]\n" + extra + "\n";
}

class MlpBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("vramd-mlp-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "1");
  }
  void TearDown() override {
    instances_.clear();
    model_.reset();
    fs::remove_all(root_);
  }

  void WriteWeights(const std::vector<TensorToWrite>& tensors, const std::string& file =
                                                                   "model.safetensors") {
    ASSERT_TRUE(safetensors::WriteFile(root_ / "1" / file, tensors).ok());
  }

  // Loads with `config_text` and creates `instances` CPU instances, each under its own owner.
  Status Load(const std::string& config_text, int instances = 1) {
    config_ = std::make_unique<config::ModelConfig>();
    if (!google::protobuf::TextFormat::ParseFromString(config_text, config_.get())) {
      return Status::InvalidArgument("test config does not parse");
    }
    VRAMD_ASSIGN_OR_RETURN(Backend * backend, FindBackend(*config_));
    instances_.clear();  // a previous load's, before their owners close
    model_.reset();
    instance_owners_.clear();
    version_owner_ = memory::ScopedOwner(&ledger_, ledger_.root(), memory::OwnerKind::kVersion,
                                         "1");
    ModelContext ctx{config_->name(), 1,         root_,           root_ / "1",
                     config_.get(),   &allocator_, version_owner_.id()};
    timing_ = std::make_unique<LoadTiming>();
    ctx.timing = timing_.get();
    {
      memory::OwnerScope scope(ctx.owner);
      VRAMD_ASSIGN_OR_RETURN(model_, backend->LoadModel(ctx));
    }
    for (int i = 0; i < instances; ++i) {
      instance_owners_.emplace_back(&ledger_, version_owner_.id(), memory::OwnerKind::kInstance,
                                    "i" + std::to_string(i));
      InstanceContext ictx{"i" + std::to_string(i), i, DeviceKind::kCpu, -1,
                           instance_owners_.back().id(), timing_.get()};
      memory::OwnerScope scope(ictx.owner);
      VRAMD_ASSIGN_OR_RETURN(auto instance, model_->CreateInstance(ictx));
      instances_.push_back(std::move(instance));
    }
    return Status::Ok();
  }

  Result<std::vector<float>> Run(const std::vector<float>& x, int64_t batch, int64_t k,
                                 size_t instance = 0) {
    InferRequest r;
    r.inputs.push_back(Tensor{"INPUT0", DataType::kFp32, {batch, k},
                              SharedBuffer::CopyOf(x.data(), x.size() * 4)});
    std::vector<Tensor> out;
    VRAMD_RETURN_IF_ERROR(instances_[instance]->Execute(r, &out));
    if (out.size() != 1 || out[0].name != "OUTPUT0" || out[0].datatype != DataType::kFp32) {
      return Status::Internal("unexpected outputs");
    }
    std::vector<float> y(out[0].data.size() / 4);
    std::memcpy(y.data(), out[0].data.data(), y.size() * 4);
    if (out[0].shape != Shape{batch, static_cast<int64_t>(y.size()) / batch}) {
      return Status::Internal("unexpected output shape " + ShapeToString(out[0].shape));
    }
    return y;
  }

  static void ExpectClose(const std::vector<float>& got, const std::vector<float>& want,
                          double rel_tol) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const double tol = rel_tol * std::max(1.0, std::abs(double(want[i])));
      ASSERT_NEAR(got[i], want[i], tol) << "element " << i;
    }
  }

  Status LoadStatus(const std::string& config_text) {
    Status s = Load(config_text);
    instances_.clear();
    model_.reset();
    return s;
  }

  int64_t SelfBytes(memory::OwnerId owner) { return ledger_.Stats(owner)->live_bytes; }

  // The last load's phase `name`; a zero phase named "" when it was not recorded.
  LoadPhase Phase(std::string_view name) const {
    for (const LoadPhase& p : timing_->phases()) {
      if (p.name == name) return p;
    }
    return {};
  }

  // Live bytes of `owner` on `device`.
  int64_t BytesOn(memory::OwnerId owner, memory::Device device) const {
    for (const auto& o : ledger_.Snapshot()) {
      if (o.id != owner) continue;
      for (const auto& [d, bytes] : o.live_bytes_by_device) {
        if (d == device) return bytes;
      }
    }
    return 0;
  }

  fs::path root_;
  memory::Ledger ledger_;
  memory::Allocator allocator_{&ledger_};
  memory::ScopedOwner version_owner_;
  std::vector<memory::ScopedOwner> instance_owners_;
  std::unique_ptr<config::ModelConfig> config_;
  std::unique_ptr<LoadTiming> timing_;  // the last load's
  // Destroyed first: instances, then the model (they free into the allocator above).
  std::unique_ptr<BackendModel> model_;
  std::vector<std::unique_ptr<BackendInstance>> instances_;
};

TEST_F(MlpBackendTest, IsABuiltInBackend) {
  EXPECT_THAT(AvailableBackends(), ::testing::Contains("mlp"));
  config::ModelConfig c;
  c.set_backend("mlp");
  auto b = FindBackend(c);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->name(), "mlp");
}

TEST_F(MlpBackendTest, Fp32OutputsEqualTheNaiveReferenceAtBatchOneAndMax) {
  const Weights m = RandomWeights({16, 48, 40, 8}, false, 1);
  WriteWeights(MlpTensors(m, false));
  ASSERT_TRUE(Load(Config("m", 16, 8, 5)).ok());
  for (int64_t batch : {1, 5}) {
    const auto x = RandomMlpInput(batch, 16, 100 + batch);
    auto y = Run(x, batch, 16);
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    ExpectClose(*y, MlpReference(m, x, batch), kRelTol);
  }
}

TEST_F(MlpBackendTest, Fp16WeightsEqualTheReferenceOnTheirFp16Values) {
  const Weights m = RandomWeights({32, 64, 64, 64, 10}, true, 2);
  WriteWeights(MlpTensors(m, true));
  ASSERT_TRUE(Load(Config("m", 32, 10, 7)).ok());
  for (int64_t batch : {1, 7}) {
    const auto x = RandomMlpInput(batch, 32, 200 + batch);
    auto y = Run(x, batch, 32);
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    ExpectClose(*y, MlpReference(m, x, batch), kRelTol);
  }
}

TEST_F(MlpBackendTest, OneLayerAndWideLayers) {
  const Weights m = RandomWeights({300, 1}, false, 3);  // a single linear layer, no ReLU
  WriteWeights(MlpTensors(m, false));
  ASSERT_TRUE(Load(Config("m", 300, 1, 3)).ok());
  const auto x = RandomMlpInput(3, 300, 7);
  auto y = Run(x, 3, 300);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  ExpectClose(*y, MlpReference(m, x, 3), kRelTol);
  // A negative output stays negative: no ReLU after the last layer.
  auto w = m;
  w.b[0][0] = -1000.0f;
  WriteWeights(MlpTensors(w, false));
  ASSERT_TRUE(Load(Config("m", 300, 1, 3)).ok());
  y = Run(x, 3, 300);
  ASSERT_TRUE(y.ok());
  EXPECT_LT((*y)[0], -900.0f);
}

TEST_F(MlpBackendTest, DefaultModelFilenameIsHonoured) {
  const Weights m = RandomWeights({4, 4}, false, 4);
  WriteWeights(MlpTensors(m, false), "weights.st");
  EXPECT_EQ(LoadStatus(Config("m", 4, 4, 1)).code(), StatusCode::kNotFound);
  ASSERT_TRUE(Load(Config("m", 4, 4, 1) + "default_model_filename: \"weights.st\"\n").ok());
  auto s = LoadStatus(Config("m", 4, 4, 1) + "default_model_filename: \"../x\"\n");
  EXPECT_THAT(s.message(), HasSubstr("default_model_filename"));
}

TEST_F(MlpBackendTest, BadRequestsAreRefused) {
  const Weights m = RandomWeights({4, 6, 2}, false, 5);
  WriteWeights(MlpTensors(m, false));
  ASSERT_TRUE(Load(Config("m", 4, 2, 2)).ok());
  auto y = Run(RandomMlpInput(3, 4, 1), 3, 4);  // batch above max_batch_size
  EXPECT_EQ(y.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("[B, 4] with 1 <= B <= 2"));
  y = Run(RandomMlpInput(1, 5, 1), 1, 5);  // wrong width
  EXPECT_EQ(y.status().code(), StatusCode::kInvalidArgument);
  InferRequest r;  // no input at all
  std::vector<Tensor> out;
  EXPECT_THAT(instances_[0]->Execute(r, &out).message(), HasSubstr("missing input 'INPUT0'"));
  r.inputs.push_back(Tensor{"INPUT0", DataType::kFp32, {1, 4}, SharedBuffer::Allocate(12)});
  EXPECT_THAT(instances_[0]->Execute(r, &out).message(), HasSubstr("needs 16 bytes, got 12"));
}

// ---- load errors ------------------------------------------------------------------------------

TEST_F(MlpBackendTest, ShapeMismatchesNameTheTensor) {
  const Weights m = RandomWeights({8, 16, 16, 4}, false, 6);
  auto t = MlpTensors(m, false);

  WriteWeights(t);  // the input is 8 wide; say 9
  auto s = LoadStatus(Config("m", 9, 4, 1));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'layers.0.weight' has shape [16,8]"));
  EXPECT_THAT(s.message(), HasSubstr("the input's 9 values"));

  s = LoadStatus(Config("m", 8, 5, 1));  // the output is 4 wide; say 5
  EXPECT_THAT(s.message(), HasSubstr("'layers.2.weight' [4,16], gives 4 values but output "
                                     "'OUTPUT0' has dims [5]"));

  auto broken = t;  // layer 1 takes 15, layer 0 gives 16
  broken[2] = {"layers.1.weight", Dtype::kF32, {16, 15}, std::string(16 * 15 * 4, '\0')};
  WriteWeights(broken);
  s = LoadStatus(Config("m", 8, 4, 1));
  EXPECT_THAT(s.message(), HasSubstr("'layers.1.weight' has shape [16,15]"));
  EXPECT_THAT(s.message(), HasSubstr("the 16 outputs of layer 0: expected [16, 16]"));

  broken = t;  // bias of the wrong length
  broken[1] = {"layers.0.bias", Dtype::kF32, {15}, std::string(15 * 4, '\0')};
  WriteWeights(broken);
  EXPECT_THAT(LoadStatus(Config("m", 8, 4, 1)).message(),
              HasSubstr("'layers.0.bias' has shape [15]; expected [16]"));

  broken = t;  // a 3-d weight
  broken[0] = {"layers.0.weight", Dtype::kF32, {16, 8, 1}, t[0].bytes};
  WriteWeights(broken);
  EXPECT_THAT(LoadStatus(Config("m", 8, 4, 1)).message(),
              HasSubstr("'layers.0.weight' has shape [16,8,1]; expected [out, 8]"));
}

TEST_F(MlpBackendTest, MissingStrayAndMixedTensorsAreRefused) {
  const Weights m = RandomWeights({8, 16, 4}, false, 7);
  auto t = MlpTensors(m, false);
  auto broken = t;
  broken.erase(broken.begin() + 3);  // layers.1.bias
  WriteWeights(broken);
  EXPECT_THAT(LoadStatus(Config("m", 8, 4, 1)).message(),
              HasSubstr("tensor 'layers.1.bias' is missing"));

  broken = t;  // layers 0 and 2, no 1
  broken[2].name = "layers.2.weight";
  broken[3].name = "layers.2.bias";
  WriteWeights(broken);
  EXPECT_THAT(LoadStatus(Config("m", 8, 4, 1)).message(), HasSubstr("layer 1 is missing"));

  broken = t;
  broken.push_back({"embedding", Dtype::kF32, {1}, std::string(4, '\0')});
  WriteWeights(broken);
  EXPECT_THAT(LoadStatus(Config("m", 8, 4, 1)).message(),
              HasSubstr("tensor 'embedding' is not an mlp tensor"));

  broken = t;
  broken[1] = {"layers.0.bias", Dtype::kF16, {16}, EncodeWeights(m.b[0], true)};
  WriteWeights(broken);
  EXPECT_THAT(LoadStatus(Config("m", 8, 4, 1)).message(), HasSubstr("all weights must share"));

  broken = t;
  for (auto& x : broken) {
    x.dtype = Dtype::kBF16;
    x.bytes.resize(x.bytes.size() / 2);
  }
  WriteWeights(broken);
  EXPECT_THAT(LoadStatus(Config("m", 8, 4, 1)).message(),
              HasSubstr("is BF16; the mlp backend takes F32 or F16 weights"));

  WriteWeights({});
  EXPECT_THAT(LoadStatus(Config("m", 8, 4, 1)).message(), HasSubstr("no layers"));
}

TEST_F(MlpBackendTest, CorruptOrMissingFilesAreRefused) {
  auto s = LoadStatus(Config("m", 8, 4, 1));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("model.safetensors: no such file"));
  const std::string truncated("\x10\0\0\0\0\0\0\0{\"a\":", 13);  // 16 header bytes promised
  std::ofstream(root_ / "1" / "model.safetensors", std::ios::binary) << truncated;
  s = LoadStatus(Config("m", 8, 4, 1));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("not a valid safetensors file"));
}

TEST_F(MlpBackendTest, ConfigErrorsNameTheField) {
  const Weights m = RandomWeights({4, 4}, false, 8);
  WriteWeights(MlpTensors(m, false));
  auto expect = [&](const std::string& text, const std::string& field) {
    auto s = LoadStatus(text);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(s.message(), HasSubstr(field)) << text;
  };
  expect(Config("m", 4, 4, 0), "max_batch_size");
  expect(Config("m", -1, 4, 1), "input[0].dims");
  expect(Config("m", 4, 4, 1, "input [ { name: \"B\" data_type: TYPE_FP32 dims: [ 4 ] } ]"),
         "input: expected exactly 1 input, got 2");
  std::string fp16 = Config("m", 4, 4, 1);
  fp16.replace(fp16.find("TYPE_FP32"), 9, "TYPE_FP16");
  expect(fp16, "input[0].data_type: expected TYPE_FP32, got TYPE_FP16");
  expect(Config("m", 4, 4, 1,
                "parameters { key: \"cublas_workspace_mib\" value { string_value: \"lots\" } }"),
         "parameters['cublas_workspace_mib']");
}

// ---- memory: one copy of the weights, a workspace per instance ------------------------------

TEST_F(MlpBackendTest, WeightsAreLoadedOnceAndSharedByEveryInstance) {
  const Weights m = RandomWeights({64, 256, 256, 32}, false, 9);
  WriteWeights(MlpTensors(m, false));
  constexpr int kMaxBatch = 8;
  ASSERT_TRUE(Load(Config("m", 64, 32, kMaxBatch, "instance_group [ { kind: KIND_CPU count: 4 } ]"),
                   4)
                  .ok());
  mlp::MlpPlan plan;
  plan.layers = {{64, 256}, {256, 256}, {256, 32}};
  const int64_t weights = static_cast<int64_t>(mlp::MakeLayout(plan, 4).total_bytes);
  EXPECT_GE(weights, int64_t((64 * 256 + 256 + 256 * 256 + 256 + 256 * 32 + 32) * 4));
  const int64_t workspace = 2 * kMaxBatch * 256 * 4;  // two activations of 8 x 256 floats

  auto version = ledger_.Stats(version_owner_.id());
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(version->live_bytes, weights);  // one copy, not four
  EXPECT_EQ(version->live_count, 1);
  for (const auto& owner : instance_owners_) {
    auto s = ledger_.Stats(owner.id());
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->live_bytes, workspace);
    EXPECT_EQ(s->live_count, 1);
  }
  EXPECT_EQ(*ledger_.SubtreeLiveBytes(version_owner_.id()), weights + 4 * workspace);

  // Every instance computes the same, concurrently, from the shared weights.
  const auto x = RandomMlpInput(kMaxBatch, 64, 10);
  const auto want = MlpReference(m, x, kMaxBatch);
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int n = 0; n < 50; ++n) {
        auto y = Run(x, kMaxBatch, 64, i);
        if (!y.ok() || y->size() != want.size()) {
          ++failures[i];
          continue;
        }
        for (size_t j = 0; j < want.size(); ++j) {
          if (std::abs((*y)[j] - want[j]) > kRelTol * std::max(1.0f, std::abs(want[j]))) {
            ++failures[i];
            break;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0));
  // Execute allocates nothing through the ledger.
  EXPECT_EQ(*ledger_.SubtreeLiveBytes(version_owner_.id()), weights + 4 * workspace);

  instances_.clear();
  for (const auto& owner : instance_owners_) EXPECT_EQ(SelfBytes(owner.id()), 0);
  model_.reset();
  EXPECT_EQ(SelfBytes(version_owner_.id()), 0);
}

TEST_F(MlpBackendTest, LoadTimingRecordsTheFileReadAndTheHostStage) {
  const Weights m = RandomWeights({64, 256, 32}, false, 12);
  WriteWeights(MlpTensors(m, false));
  ASSERT_TRUE(Load(Config("m", 64, 32, 4, "instance_group [ { kind: KIND_CPU count: 2 } ]"), 2)
                  .ok());
  mlp::MlpPlan plan;
  plan.layers = {{64, 256}, {256, 32}};
  const LoadPhase read = Phase("file_read");
  EXPECT_EQ(read.name, "file_read");
  EXPECT_EQ(read.bytes, fs::file_size(root_ / "1" / "model.safetensors"));
  EXPECT_GT(read.seconds, 0.0);
  const LoadPhase stage = Phase("host_stage");
  EXPECT_EQ(stage.name, "host_stage");
  EXPECT_EQ(stage.bytes, mlp::MakeLayout(plan, 4).total_bytes);  // the CPU weights only
  EXPECT_GT(stage.seconds, 0.0);
  // CPU instances upload nothing.
  EXPECT_EQ(Phase("h2d").name, "");
  EXPECT_EQ(Phase("d2d").name, "");
}

TEST_F(MlpBackendTest, GpuStagingImageIsPinnedWhereItCanBeAndHostMemoryElse) {
  // FP16 weights: the staged image keeps the file's element size. No GPU instance is created
  // (this test runs without a GPU too): LoadModel alone stages the image.
  const Weights m = RandomWeights({64, 128, 16}, true, 13);
  WriteWeights(MlpTensors(m, true));
  ASSERT_TRUE(Load(Config("m", 64, 16, 4, "instance_group [ { kind: KIND_GPU count: 1 } ]"), 0)
                  .ok());
  mlp::MlpPlan plan;
  plan.layers = {{64, 128}, {128, 16}};
  const int64_t image = static_cast<int64_t>(mlp::MakeLayout(plan, 2).total_bytes);
  EXPECT_EQ(Phase("host_stage").bytes, static_cast<uint64_t>(image));
  EXPECT_EQ(SelfBytes(version_owner_.id()), image);
  // Pinned with a GPU; without one pinned memory is Unavailable and the image is ordinary host
  // memory, with no error.
  const bool gpu = memory::CudaDeviceCount() > 0;
  EXPECT_EQ(BytesOn(version_owner_.id(), memory::Device::CudaHost()), gpu ? image : 0);
  EXPECT_EQ(BytesOn(version_owner_.id(), memory::Device::Cpu()), gpu ? 0 : image);
  model_.reset();
  EXPECT_EQ(SelfBytes(version_owner_.id()), 0);
}

// ---- the example model against the numpy reference ------------------------------------------

TEST(MlpExampleTest, ExampleModelMatchesTheNumpyReference) {
  const fs::path dir = fs::path(VRAMD_SOURCE_DIR) / "examples/models/mlp_small";
  std::ifstream in(dir / "config.pbtxt");
  std::stringstream text;
  text << in.rdbuf();
  config::ModelConfig config;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text.str(), &config));
  memory::Ledger ledger;
  memory::Allocator allocator(&ledger);
  auto backend = FindBackend(config);
  ASSERT_TRUE(backend.ok());
  ModelContext ctx{config.name(), 1, dir, dir / "1", &config, &allocator, memory::kNoOwner};
  auto model = (*backend)->LoadModel(ctx);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto instance = (*model)->CreateInstance({"i0", 0, DeviceKind::kCpu, -1});
  ASSERT_TRUE(instance.ok()) << instance.status().ToString();

  // Written by: scripts/make_mlp_model.py reference examples/models/mlp_small
  //             examples/models/mlp_small/reference.safetensors --batch 8 --seed 1
  auto ref = safetensors::File::Read(dir / "reference.safetensors");
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const auto* x = ref->Find("input");
  const auto* want = ref->Find("output");
  ASSERT_TRUE(x != nullptr && want != nullptr);
  InferRequest r;
  r.inputs.push_back(
      Tensor{"INPUT0", DataType::kFp32, x->shape, SharedBuffer::CopyOf(x->data, x->size())});
  std::vector<Tensor> out;
  ASSERT_TRUE((*instance)->Execute(r, &out).ok());
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].shape, want->shape);
  std::vector<float> got(want->element_count), expected(want->element_count);
  std::memcpy(got.data(), out[0].data.data(), got.size() * 4);
  std::memcpy(expected.data(), want->data, expected.size() * 4);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], expected[i], kRelTol * std::max(1.0f, std::abs(expected[i]))) << i;
  }
}

}  // namespace
}  // namespace vramd::backends
