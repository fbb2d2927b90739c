// The mlp backend on a real GPU: cuBLAS's results against the CPU path (OpenBLAS) and a naive
// double-precision reference, for FP32 and FP16 weights; and the device memory that 1, 2, 4, 8
// and 16 GPU instances of one 64 MiB model take, as NVML and the ledger see it: the weights
// once per device, and each extra instance only its workspace, stream and cuBLAS handle.
//
// Tolerances, per element, relative to max(1, |expected|):
//   - CPU vs the double reference: 1e-5 (FP32 math on the same weights);
//   - cuBLAS FP32 vs CPU: 1e-4 (FP32 GEMMs summing in another order, no TF32);
//   - cuBLAS FP16 vs CPU: 1e-2 (the GPU rounds activations to FP16 before each GEMM, as cuBLAS
//     takes one type for both operands; the CPU keeps them in FP32).
// Target: each extra instance <= 32 MiB of device memory (NVML).
// And a large model's load, phase by phase (file_read, host_stage, h2d): its weights staged in
// pinned host memory, so their upload runs near the pinned copy rate measured in the same run.
//
// Without a CUDA device every test skips, saying so; scripts/device/run.sh runs them on the
// GPU machine. Figures are printed as "FIGURE <name> <value> <unit>".
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <google/protobuf/text_format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "backends/mlp/mlp_plan.h"
#include "backends/mlp/safetensors_writer.h"
#include "core/half.h"
#include "core/load_timing.h"
#include "memory/allocator.h"
#include "memory/cuda_devices.h"
#include "memory/ledger.h"
#include "memory/nvml.h"
#include "support/mlp_reference.h"

namespace vramd::backends {
namespace {

namespace fs = std::filesystem;
using safetensors::Dtype;
using safetensors::TensorToWrite;

constexpr int64_t kMiB = 1 << 20;
constexpr double kCpuTol = 1e-5;
constexpr double kFp32Tol = 1e-4;
constexpr double kFp16Tol = 1e-2;
constexpr int64_t kPerInstanceTarget = 32 * kMiB;
// The weights' upload must reach this fraction of a plain pinned copy's rate (the same bytes,
// in the same run). Pageable memory reaches well under it on a PCIe host.
constexpr double kPinnedRateFraction = 0.6;

void Figure(const std::string& name, double value, const char* unit) {
  std::printf("FIGURE %s %.4g %s\n", name.c_str(), value, unit);
  std::fflush(stdout);
}

// ---- a model written here, and a reference computed here ------------------------------------

using Weights = vramd::testing::MlpWeights;
using vramd::testing::MlpReference;
using vramd::testing::MlpTensors;
using vramd::testing::RandomMlpInput;


Weights RandomWeights(std::vector<int64_t> widths, bool fp16, uint32_t seed) {
  return vramd::testing::RandomMlpWeights(std::move(widths), seed, 0.1f, fp16,
                                          vramd::testing::MlpInit::kHeUniform);
}

void WriteModel(const fs::path& file, const Weights& m, bool fp16) {
  const auto t = MlpTensors(m, fp16);
  fs::create_directories(file.parent_path());
  ASSERT_TRUE(safetensors::WriteFile(file, t).ok());
}

// The largest |got - want| / max(1, |want|).
double MaxRelError(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = got.size() == want.size() ? 0.0 : INFINITY;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    worst = std::max(worst, std::abs(double(got[i]) - want[i]) /
                                std::max(1.0, std::abs(double(want[i]))));
  }
  return worst;
}

std::string Config(int64_t k, int64_t n, int max_batch, const std::string& groups) {
  return "name: \"mlp\"\nbackend: \"mlp\"\nmax_batch_size: " + std::to_string(max_batch) +
         "\ninput [ { name: \"INPUT0\" data_type: TYPE_FP32 dims: [ " + std::to_string(k) +
         " ] } ]\noutput [ { name: \"OUTPUT0\" data_type: TYPE_FP32 dims: [ " +
         std::to_string(n) + " ] } ]\ninstance_group [ " + groups + " ]\n";
}

// One version loaded as the runtime would: a version owner, the backend model under it, and
// instances each under their own owner. Members are destroyed instances first.
struct Loaded {
  memory::Ledger* ledger = nullptr;
  config::ModelConfig config;
  memory::ScopedOwner version;
  std::vector<memory::ScopedOwner> instance_owners;
  std::unique_ptr<BackendModel> model;
  std::vector<std::unique_ptr<BackendInstance>> instances;

  ~Loaded() {
    instances.clear();
    {
      memory::OwnerScope scope(version.id());
      model.reset();
    }
  }

  Result<std::vector<float>> Run(size_t i, const std::vector<float>& x, int64_t batch, int64_t k) {
    InferRequest r;
    r.inputs.push_back(Tensor{"INPUT0", DataType::kFp32, {batch, k},
                              SharedBuffer::CopyOf(x.data(), x.size() * 4)});
    std::vector<Tensor> out;
    VRAMD_RETURN_IF_ERROR(instances[i]->Execute(r, &out));
    if (out.size() != 1) return Status::Internal("expected one output");
    std::vector<float> y(out[0].data.size() / 4);
    std::memcpy(y.data(), out[0].data.data(), y.size() * 4);
    return y;
  }
};

// Loads `config_text` from `dir` with the given instances (a kind and, for a GPU, device 0).
Status Load(Loaded* l, memory::Ledger* ledger, memory::Allocator* allocator, const fs::path& dir,
            const std::string& config_text, const std::vector<DeviceKind>& kinds) {
  l->ledger = ledger;
  if (!google::protobuf::TextFormat::ParseFromString(config_text, &l->config)) {
    return Status::InvalidArgument("test config does not parse");
  }
  VRAMD_ASSIGN_OR_RETURN(Backend * backend, FindBackend(l->config));
  l->version = memory::ScopedOwner(ledger, ledger->root(), memory::OwnerKind::kVersion, "1");
  ModelContext ctx{"mlp", 1, dir, dir / "1", &l->config, allocator, l->version.id()};
  {
    memory::OwnerScope scope(ctx.owner);
    VRAMD_ASSIGN_OR_RETURN(l->model, backend->LoadModel(ctx));
  }
  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string name = "mlp_" + std::to_string(i);
    l->instance_owners.emplace_back(ledger, l->version.id(), memory::OwnerKind::kInstance, name);
    InstanceContext ictx{name, static_cast<int>(i), kinds[i], kinds[i] == DeviceKind::kGpu ? 0 : -1,
                         l->instance_owners.back().id()};
    memory::OwnerScope scope(ictx.owner);
    VRAMD_ASSIGN_OR_RETURN(auto instance, l->model->CreateInstance(ictx));
    l->instances.push_back(std::move(instance));
  }
  return Status::Ok();
}

int64_t BytesOn(const memory::Ledger& ledger, memory::OwnerId owner, memory::Device device) {
  for (const auto& o : ledger.Snapshot()) {
    if (o.id != owner) continue;
    for (const auto& [d, bytes] : o.live_bytes_by_device)
      if (d == device) return bytes;
  }
  return 0;
}

class GpuMlpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (memory::CudaDeviceCount() == 0) return;
    cudaSetDevice(0);
    cudaFree(nullptr);
    auto nvml = memory::Nvml::Load();
    if (nvml.ok()) nvml_ = std::move(nvml).value().release();
  }

  void SetUp() override {
    if (memory::CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device (" << memory::CudaDescription()
                   << "); this test runs on the GPU machine through scripts/device/run.sh";
    }
    dir_ = fs::temp_directory_path() /
           ("vramd-gpu-mlp-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // This process's device memory per NVML; the device's used bytes where the PID is not listed
  // (a container's PID namespace: the machine is ours alone, so its changes are ours).
  int64_t NvmlUsed() {
    cudaDeviceSynchronize();
    if (nvml_ == nullptr) return -1;
    auto mine = nvml_->ProcessUsedBytes(0, static_cast<uint32_t>(::getpid()));
    if (mine.ok()) return static_cast<int64_t>(*mine);
    if (!printed_fallback_) {
      std::printf("note: NVML process figure unavailable (%s); using device used bytes\n",
                  mine.status().message().c_str());
      printed_fallback_ = true;
    }
    auto dev = nvml_->DeviceMemory(0);
    return dev.ok() ? static_cast<int64_t>(dev->used_bytes) : -1;
  }

  // CPU and GPU instances of one model: cuBLAS against OpenBLAS and the double reference.
  void CompareWithCpu(bool fp16, double tol, const std::string& figure) {
    const Weights m = RandomWeights({256, 512, 512, 384, 64}, fp16, fp16 ? 21 : 11);
    WriteModel(dir_ / "1" / "model.safetensors", m, fp16);
    memory::Ledger ledger;
    memory::Allocator allocator(&ledger);
    {
      Loaded l;
      Status s = Load(&l, &ledger, &allocator, dir_,
                      Config(256, 64, 32, "{ kind: KIND_CPU count: 1 }, { kind: KIND_GPU count: 1 }"),
                      {DeviceKind::kCpu, DeviceKind::kGpu});
      ASSERT_TRUE(s.ok()) << s.ToString();
      double worst = 0, worst_cpu = 0;
      for (int64_t batch : {1, 7, 32}) {
        const auto x = RandomMlpInput(batch, 256, 300 + batch);
        auto cpu = l.Run(0, x, batch, 256);
        auto gpu = l.Run(1, x, batch, 256);
        ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
        ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
        const double cpu_err = MaxRelError(*cpu, MlpReference(m, x, batch));
        const double gpu_err = MaxRelError(*gpu, *cpu);
        EXPECT_LE(cpu_err, kCpuTol) << "batch " << batch;
        EXPECT_LE(gpu_err, tol) << "batch " << batch;
        worst = std::max(worst, gpu_err);
        worst_cpu = std::max(worst_cpu, cpu_err);
      }
      Figure(figure + "_max_rel_err_vs_cpu", worst, "ratio");
      Figure(figure + "_cpu_max_rel_err_vs_reference", worst_cpu, "ratio");
    }
    EXPECT_EQ(*ledger.SubtreeLiveBytes(ledger.root()), 0);
  }

  static inline memory::Nvml* nvml_ = nullptr;  // leaked on purpose: lives for the binary
  bool printed_fallback_ = false;
  fs::path dir_;
};

TEST_F(GpuMlpTest, CublasFp32MatchesTheCpuReference) {
  CompareWithCpu(false, kFp32Tol, "mlp_cublas_fp32");
}

TEST_F(GpuMlpTest, CublasFp16MatchesTheCpuReference) {
  CompareWithCpu(true, kFp16Tol, "mlp_cublas_fp16");
}

TEST_F(GpuMlpTest, InstancesRunConcurrentlyOnTheSharedHandle) {
  const Weights m = RandomWeights({128, 256, 256, 32}, false, 41);
  WriteModel(dir_ / "1" / "model.safetensors", m, false);
  memory::Ledger ledger;
  memory::Allocator allocator(&ledger);
  Loaded l;
  Status s = Load(&l, &ledger, &allocator, dir_, Config(128, 32, 8, "{ kind: KIND_GPU count: 4 }"),
                  std::vector<DeviceKind>(4, DeviceKind::kGpu));
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<std::vector<float>> inputs, want;
  for (int i = 0; i < 4; ++i) {
    inputs.push_back(RandomMlpInput(8, 128, 500 + i));
    auto y = l.Run(i, inputs[i], 8, 128);
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    EXPECT_LE(MaxRelError(*y, MlpReference(m, inputs[i], 8)), kFp32Tol);
    want.push_back(*y);
  }
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int n = 0; n < 200; ++n) {
        auto y = l.Run(i, inputs[i], 8, 128);
        if (!y.ok() || *y != want[i]) ++mismatches[i];
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST_F(GpuMlpTest, ABadDeviceIsAnErrorNotACrash) {
  const Weights m = RandomWeights({8, 8}, false, 1);
  WriteModel(dir_ / "1" / "model.safetensors", m, false);
  memory::Ledger ledger;
  memory::Allocator allocator(&ledger);
  Loaded l;
  ASSERT_TRUE(Load(&l, &ledger, &allocator, dir_, Config(8, 8, 1, "{ kind: KIND_GPU count: 1 }"),
                   {})
                  .ok());
  auto instance = l.model->CreateInstance({"bad", 0, DeviceKind::kGpu, 999, l.version.id()});
  ASSERT_FALSE(instance.ok());
  EXPECT_EQ(instance.status().code(), StatusCode::kInternal);
  EXPECT_NE(instance.status().message().find("999"), std::string::npos)
      << instance.status().ToString();
}

TEST_F(GpuMlpTest, InstancesShareOneCopyOfTheWeightsAndEachCostsOnlyItsWorkspace) {
  // 1024 -> 2592 -> 2592 -> 2592 -> 256, FP32: about 64 MiB of weights.
  const Weights m = RandomWeights({1024, 2592, 2592, 2592, 256}, false, 31);
  WriteModel(dir_ / "1" / "model.safetensors", m, false);
  constexpr int kMaxBatch = 16;
  mlp::MlpPlan plan;
  plan.layers = {{1024, 2592}, {2592, 2592}, {2592, 2592}, {2592, 256}};
  const int64_t weight_bytes = static_cast<int64_t>(mlp::MakeLayout(plan, 4).total_bytes);
  Figure("mlp_gpu_weights_mib", double(weight_bytes) / kMiB, "MiB");

  memory::Ledger ledger;
  memory::Allocator allocator(&ledger);
  const auto x = RandomMlpInput(kMaxBatch, 1024, 5);
  const int64_t base = NvmlUsed();
  ASSERT_GE(base, 0) << "NVML is needed for this test";
  std::vector<std::pair<int, int64_t>> totals;  // instances, NVML bytes above the base
  for (int count : {1, 2, 4, 8, 16}) {
    {
      Loaded l;
      Status s = Load(&l, &ledger, &allocator, dir_,
                      Config(1024, 256, kMaxBatch,
                             "{ kind: KIND_GPU count: " + std::to_string(count) + " }"),
                      std::vector<DeviceKind>(count, DeviceKind::kGpu));
      ASSERT_TRUE(s.ok()) << s.ToString();
      std::vector<float> first;
      for (int i = 0; i < count; ++i) {  // every instance runs, so cuBLAS is fully set up
        auto y = l.Run(i, x, kMaxBatch, 1024);
        ASSERT_TRUE(y.ok()) << y.status().ToString();
        if (i == 0) first = *y;
        EXPECT_EQ(*y, first) << "instance " << i << " disagrees with instance 0";
      }
      const int64_t used = NvmlUsed() - base;
      totals.emplace_back(count, used);
      Figure("mlp_gpu_nvml_mib_" + std::to_string(count) + "_instances", double(used) / kMiB,
             "MiB");

      // The ledger: one copy of the weights on the GPU, under the version, and no host copy
      // left (the staging image goes after the upload); each instance only its own memory.
      EXPECT_EQ(BytesOn(ledger, l.version.id(), memory::Device::Cuda(0)), weight_bytes);
      EXPECT_EQ(BytesOn(ledger, l.version.id(), memory::Device::Cpu()), 0);
      EXPECT_EQ(ledger.Stats(l.version.id())->live_count, 1);
      const int64_t per_instance = ledger.Stats(l.instance_owners[0].id())->live_bytes;
      EXPECT_GT(per_instance, 0);
      for (const auto& owner : l.instance_owners) {
        EXPECT_EQ(ledger.Stats(owner.id())->live_bytes, per_instance);
        EXPECT_EQ(BytesOn(ledger, owner.id(), memory::Device::Cuda(0)), per_instance);
      }
      if (count == 1) Figure("mlp_gpu_ledger_mib_per_instance", double(per_instance) / kMiB, "MiB");
      auto pool = allocator.Pool(memory::Device::Cuda(0));
      ASSERT_TRUE(pool.ok());
      Figure("mlp_gpu_pool_reserved_mib_" + std::to_string(count) + "_instances",
             double((*pool)->Stats().reserved_bytes) / kMiB, "MiB");
    }
    EXPECT_EQ(*ledger.SubtreeLiveBytes(ledger.root()), 0);
    allocator.Trim(memory::Device::Cuda(0));
  }
  const double per_extra = double(totals.back().second - totals.front().second) / 15.0;
  Figure("mlp_gpu_per_extra_instance_mib", per_extra / kMiB, "MiB");
  for (size_t i = 1; i < totals.size(); ++i) {
    const double step = double(totals[i].second - totals[i - 1].second) /
                        double(totals[i].first - totals[i - 1].first);
    Figure("mlp_gpu_per_extra_instance_mib_" + std::to_string(totals[i - 1].first) + "_to_" +
               std::to_string(totals[i].first),
           step / kMiB, "MiB");
  }
  EXPECT_LE(per_extra, double(kPerInstanceTarget))
      << "each extra instance must cost at most 32 MiB of device memory";
  // The baseline, measured in this run: what one more process-instance would cost, its own CUDA
  // context (this process's NVML figure before the model loads) plus its own copy of the model
  // (the 1-instance figure). Target: an extra thread-instance costs at most 5% of that.
  const double process_instance = double(base + totals.front().second);
  Figure("mlp_gpu_process_instance_baseline_mib", process_instance / kMiB, "MiB");
  Figure("mlp_gpu_extra_instance_vs_process_instance_ratio", per_extra / process_instance, "ratio");
  EXPECT_LE(per_extra / process_instance, 0.05);
  // One copy of the weights whatever the count: 16 instances hold far less than 2 copies more.
  EXPECT_LT(totals.back().second - totals.front().second, 15 * kPerInstanceTarget);
}

TEST_F(GpuMlpTest, ALargeModelUploadsFromPinnedMemoryAtThePinnedRate) {
  // 4096 -> 4096 x3 -> 256, FP32: about 196 MiB of weights.
  const std::vector<int64_t> widths = {4096, 4096, 4096, 4096, 256};
  const Weights m = RandomWeights(widths, false, 51);
  const fs::path file = dir_ / "1" / "model.safetensors";
  WriteModel(file, m, false);
  mlp::MlpPlan plan;
  for (size_t i = 0; i + 1 < widths.size(); ++i) plan.layers.push_back({widths[i], widths[i + 1]});
  const uint64_t weight_bytes = mlp::MakeLayout(plan, 4).total_bytes;

  memory::Ledger ledger;
  memory::Allocator allocator(&ledger);
  LoadTiming timing;
  Loaded l;
  l.ledger = &ledger;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      Config(4096, 256, 4, "{ kind: KIND_GPU count: 1 }"), &l.config));
  auto backend = FindBackend(l.config);
  ASSERT_TRUE(backend.ok());
  l.version = memory::ScopedOwner(&ledger, ledger.root(), memory::OwnerKind::kVersion, "1");
  ModelContext ctx{"mlp", 1, dir_, dir_ / "1", &l.config, &allocator, l.version.id(), &timing};
  {
    memory::OwnerScope scope(ctx.owner);
    auto model = (*backend)->LoadModel(ctx);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    l.model = std::move(model).value();
  }
  // Staged in pinned memory, charged to the version.
  EXPECT_EQ(BytesOn(ledger, l.version.id(), memory::Device::CudaHost()),
            static_cast<int64_t>(weight_bytes));
  EXPECT_EQ(BytesOn(ledger, l.version.id(), memory::Device::Cpu()), 0);

  l.instance_owners.emplace_back(&ledger, l.version.id(), memory::OwnerKind::kInstance, "mlp_0");
  InstanceContext ictx{"mlp_0", 0, DeviceKind::kGpu, 0, l.instance_owners.back().id(), &timing};
  {
    memory::OwnerScope scope(ictx.owner);
    auto instance = l.model->CreateInstance(ictx);
    ASSERT_TRUE(instance.ok()) << instance.status().ToString();
    l.instances.push_back(std::move(instance).value());
  }
  // The staging image is gone after the upload; trimming unpins it.
  EXPECT_EQ(BytesOn(ledger, l.version.id(), memory::Device::CudaHost()), 0);
  EXPECT_EQ(BytesOn(ledger, l.version.id(), memory::Device::Cuda(0)),
            static_cast<int64_t>(weight_bytes));
  auto pinned_pool = allocator.Pool(memory::Device::CudaHost());
  ASSERT_TRUE(pinned_pool.ok());
  EXPECT_GE((*pinned_pool)->Stats().reserved_bytes, weight_bytes);
  allocator.Trim(memory::Device::CudaHost());
  EXPECT_EQ((*pinned_pool)->Stats().reserved_bytes, 0u);

  // It computes what the reference does.
  const auto x = RandomMlpInput(4, 4096, 52);
  auto y = l.Run(0, x, 4, 4096);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_LE(MaxRelError(*y, MlpReference(m, x, 4)), kFp32Tol);

  // Where the load's time went.
  std::map<std::string, LoadPhase> phases;
  for (const LoadPhase& p : timing.phases()) phases[p.name] = p;
  ASSERT_TRUE(phases.count("file_read") && phases.count("host_stage") && phases.count("h2d"));
  EXPECT_EQ(phases["file_read"].bytes, fs::file_size(file));
  EXPECT_EQ(phases["host_stage"].bytes, weight_bytes);
  EXPECT_EQ(phases["h2d"].bytes, weight_bytes);
  EXPECT_EQ(phases.count("d2d"), 0u);
  for (const auto& [name, p] : phases) Figure("mlp_load_" + name + "_ms", p.seconds * 1e3, "ms");
  const double upload_gbps = double(weight_bytes) / phases["h2d"].seconds / 1e9;
  Figure("mlp_load_h2d_gbps", upload_gbps, "GB/s");

  // The rate a plain pinned copy of the same bytes reaches now (best of 3).
  auto src = allocator.Allocate(memory::Device::CudaHost(), weight_bytes);
  auto dst = allocator.Allocate(memory::Device::Cuda(0), weight_bytes);
  ASSERT_TRUE(src.ok() && dst.ok());
  std::memset(src->data(), 1, weight_bytes);
  double pinned_gbps = 0;
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    ASSERT_EQ(cudaMemcpy(dst->data(), src->data(), weight_bytes, cudaMemcpyHostToDevice),
              cudaSuccess);
    const std::chrono::duration<double> s = std::chrono::steady_clock::now() - start;
    pinned_gbps = std::max(pinned_gbps, double(weight_bytes) / s.count() / 1e9);
  }
  src->Reset();
  dst->Reset();
  allocator.TrimAll();
  Figure("pinned_h2d_same_bytes_gbps", pinned_gbps, "GB/s");
  Figure("mlp_load_h2d_over_pinned_ratio", upload_gbps / pinned_gbps, "ratio");
  EXPECT_GE(upload_gbps, kPinnedRateFraction * pinned_gbps)
      << "the weights' upload should run near the pinned rate";
}

}  // namespace
}  // namespace vramd::backends
