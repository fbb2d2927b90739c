// direct_bench: the floor for serving a TorchScript model. Calls the module straight from C++
// in closed loops, as a server with no overhead at all would:
//
//   direct_bench --model model.pt --input input.bin --shape 1,3,112,112
//                [--device cuda:0|cpu] [--concurrency 1,2,4,8,16,32] [--duration S] [--warmup S]
//                [--reference output.bin] [--pageable] [--module-per-thread]
//
// For each concurrency c: c threads, each with its own CUDA stream (from c10's pool) and its own
// host buffers. Each iteration copies the input host->device, runs forward() under
// c10::InferenceMode, copies the output device->host and waits for its stream: the whole path a
// request takes through a server's backend. Host buffers are pinned (the fastest copies) unless
// --pageable. The threads share one module (TorchScript modules may be called from several
// threads at once), unless --module-per-thread. The first --warmup seconds of each concurrency
// are not measured. One JSON line per concurrency, like infer_load's:
//   {"mode":"direct","device":"cuda:0","concurrency":c,"requests":n,"errors":0,"rps":x,
//    "p50_ms":..,"p90_ms":..,"p99_ms":..,"mean_ms":..,"duration_s":..}
// With --reference, first checks one output against the file (FP32 raw, e.g. make_model.py's
// output.bin, computed on a CPU) and prints {"check":..., "max_abs_err":..., "max_abs_ref":...};
// exits 4 when the error exceeds 2% of the reference's largest magnitude (TF32 convs on a GPU
// differ from the CPU at the 1e-3 level).
#include "../latency_summary.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <torch/cuda.h>
#include <torch/script.h>

#if DIRECT_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string model;
  std::string input;
  std::string reference;
  std::vector<int64_t> shape;
  std::string device = "cuda:0";
  std::vector<int> concurrency = {1, 2, 4, 8, 16, 32};
  double duration_s = 3.0;
  double warmup_s = 1.0;
  bool pinned = true;
  bool module_per_thread = false;
};

[[noreturn]] void Usage(const std::string& why) {
  std::cerr << "direct_bench: " << why << "\n"
            << "usage: direct_bench --model model.pt --input input.bin --shape 1,3,112,112\n"
            << "       [--device cuda:0|cpu] [--concurrency 1,2,4] [--duration S] [--warmup S]\n"
            << "       [--reference output.bin] [--pageable] [--module-per-thread]\n";
  std::exit(2);
}

template <typename T>
std::vector<T> ParseList(const std::string& s) {
  std::vector<T> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    out.push_back(static_cast<T>(std::stoll(item)));
  }
  return out;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") Usage("help");
    if (a == "--pageable") { o.pinned = false; continue; }
    if (a == "--module-per-thread") { o.module_per_thread = true; continue; }
    if (i + 1 >= argc) Usage("missing value for " + a);
    std::string v = argv[++i];
    try {
      if (a == "--model") o.model = v;
      else if (a == "--input") o.input = v;
      else if (a == "--reference") o.reference = v;
      else if (a == "--shape") o.shape = ParseList<int64_t>(v);
      else if (a == "--device") o.device = v;
      else if (a == "--concurrency") o.concurrency = ParseList<int>(v);
      else if (a == "--duration") o.duration_s = std::stod(v);
      else if (a == "--warmup") o.warmup_s = std::stod(v);
      else Usage("unknown option " + a);
    } catch (const std::exception&) {
      Usage("bad value '" + v + "' for " + a);
    }
  }
  if (o.model.empty() || o.input.empty() || o.shape.empty()) Usage("--model, --input and --shape are required");
  if (o.concurrency.empty()) Usage("--concurrency is empty");
  for (int c : o.concurrency) if (c < 1 || c > 1024) Usage("concurrency must be 1..1024");
  if (o.duration_s <= 0 || o.warmup_s < 0) Usage("bad duration or warmup");
  return o;
}

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Usage("cannot read " + path);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() % sizeof(float) != 0) Usage(path + " is not a whole number of FP32 values");
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}


struct Bench {
  Options opt;
  torch::Device device{torch::kCPU};
  torch::jit::Module module;
  at::Tensor input_cpu;  // pageable, contiguous

  at::Tensor HostTensor(const at::Tensor& like_cpu) const {
    auto opts = at::TensorOptions().dtype(like_cpu.dtype());
    if (opt.pinned && device.is_cuda()) opts = opts.pinned_memory(true);
    return at::empty(like_cpu.sizes(), opts);
  }

  // One request's path: H2D, forward, D2H, wait. Returns the host output tensor.
  static void Once(torch::jit::Module& m, const torch::Device& dev, const at::Tensor& host_in,
                   at::Tensor& host_out, bool sync_cuda) {
    auto d_in = host_in.to(dev, /*non_blocking=*/true);
    std::vector<torch::jit::IValue> args{d_in};
    auto out = m.forward(args).toTensor();
    if (!host_out.defined() || host_out.sizes() != out.sizes()) {
      auto opts = at::TensorOptions().dtype(out.dtype());
#if DIRECT_WITH_CUDA
      if (dev.is_cuda() && host_in.is_pinned()) opts = opts.pinned_memory(true);
#endif
      host_out = at::empty(out.sizes(), opts);
    }
    host_out.copy_(out, /*non_blocking=*/true);
#if DIRECT_WITH_CUDA
    if (sync_cuda) c10::cuda::getCurrentCUDAStream(dev.index()).synchronize();
#endif
  }

  std::string Run(int c) {
    std::vector<std::vector<double>> lat(static_cast<size_t>(c));
    std::atomic<long> errors{0};
    std::vector<torch::jit::Module> modules;
    if (opt.module_per_thread) {
      for (int i = 0; i < c; ++i) {
        modules.push_back(torch::jit::load(opt.model, device));
        modules.back().eval();
      }
    }
    auto to_dur = [](double sec) {
      return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(sec));
    };
    const auto begin = Clock::now() + to_dur(opt.warmup_s);
    const auto end = begin + to_dur(opt.duration_s);
    std::vector<std::thread> threads;
    for (int t = 0; t < c; ++t) {
      threads.emplace_back([&, t] {
        try {
          c10::InferenceMode guard;
          torch::jit::Module& m = opt.module_per_thread ? modules[static_cast<size_t>(t)] : module;
#if DIRECT_WITH_CUDA
          std::unique_ptr<c10::cuda::CUDAStreamGuard> stream_guard;
          if (device.is_cuda()) {
            stream_guard = std::make_unique<c10::cuda::CUDAStreamGuard>(
                c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index()));
          }
#endif
          at::Tensor host_in = HostTensor(input_cpu);
          host_in.copy_(input_cpu);
          at::Tensor host_out;
          auto& mine = lat[static_cast<size_t>(t)];
          mine.reserve(1 << 16);
          for (;;) {
            auto t0 = Clock::now();
            if (t0 >= end) break;
            Once(m, device, host_in, host_out, device.is_cuda());
            auto t1 = Clock::now();
            if (t0 >= begin && t1 <= end) {
              mine.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
            }
          }
        } catch (const std::exception& e) {
          if (errors.fetch_add(1) == 0) std::cerr << "direct_bench: thread error: " << e.what() << "\n";
        }
      });
    }
    for (auto& th : threads) th.join();
    const vramd::bench::LatencySummary summary = vramd::bench::Summarize(lat, opt.duration_s);
    char line[512];
    std::snprintf(line, sizeof line,
                  "{\"mode\":\"direct\",\"device\":\"%s\",\"concurrency\":%d,\"errors\":%ld,%s,"
                  "\"duration_s\":%.3f,\"pinned\":%s,\"module_per_thread\":%s}",
                  device.str().c_str(), c, errors.load(), vramd::bench::JsonFields(summary).c_str(),
                  opt.duration_s, opt.pinned && device.is_cuda() ? "true" : "false",
                  opt.module_per_thread ? "true" : "false");
    return line;
  }
};

}  // namespace

int main(int argc, char** argv) {
  Bench b;
  b.opt = Parse(argc, argv);
  try {
    b.device = torch::Device(b.opt.device);
#if !DIRECT_WITH_CUDA
    if (b.device.is_cuda()) Usage("this build has no CUDA (LibTorch without c10_cuda); use --device cpu");
#endif
    if (b.device.is_cuda() && !b.device.has_index()) b.device.set_index(0);
    if (b.device.is_cuda() && !torch::cuda::is_available()) {
      std::cerr << "direct_bench: this LibTorch sees no CUDA device (is libtorch_cuda linked?)\n";
      return 1;
    }
    auto values = ReadFloats(b.opt.input);
    int64_t n = 1;
    for (auto d : b.opt.shape) n *= d;
    if (n != static_cast<int64_t>(values.size())) {
      Usage("--shape has " + std::to_string(n) + " elements but the input file " +
            std::to_string(values.size()));
    }
    b.input_cpu = torch::from_blob(values.data(), b.opt.shape, torch::kFloat32).clone();
    b.module = torch::jit::load(b.opt.model, b.device);
    b.module.eval();

    // Warm up the graph executor (profiling runs) and check the answer once.
    {
      c10::InferenceMode guard;
      at::Tensor host_in = b.HostTensor(b.input_cpu);
      host_in.copy_(b.input_cpu);
      at::Tensor host_out;
      for (int i = 0; i < 5; ++i) Bench::Once(b.module, b.device, host_in, host_out, b.device.is_cuda());
      if (!b.opt.reference.empty()) {
        auto ref = ReadFloats(b.opt.reference);
        auto out = host_out.contiguous().to(torch::kFloat32);
        if (static_cast<size_t>(out.numel()) != ref.size()) {
          std::cerr << "direct_bench: output has " << out.numel() << " values, reference "
                    << ref.size() << "\n";
          return 4;
        }
        const float* p = out.data_ptr<float>();
        double err = 0, mag = 0;
        for (size_t i = 0; i < ref.size(); ++i) {
          err = std::max(err, static_cast<double>(std::fabs(p[i] - ref[i])));
          mag = std::max(mag, static_cast<double>(std::fabs(ref[i])));
        }
        bool ok = err <= 0.02 * std::max(mag, 1e-6);
        std::printf("{\"check\":\"%s\",\"max_abs_err\":%.6g,\"max_abs_ref\":%.6g}\n",
                    ok ? "pass" : "fail", err, mag);
        std::fflush(stdout);
        if (!ok) return 4;
      }
    }
    for (int c : b.opt.concurrency) {
      std::printf("%s\n", b.Run(c).c_str());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::cerr << "direct_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
