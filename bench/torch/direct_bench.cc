// direct_bench: the floor for serving a TorchScript model. Calls the module straight from C++
// in closed loops, as a server with no overhead at all would:
//
//   direct_bench --model model.pt --input input.bin --shape 1,3,112,112
//                [--device cuda:0|cpu] [--concurrency 1,2,4,8,16,32] [--duration S] [--warmup S]
//                [--reference output.bin] [--pageable] [--module-per-thread]
//                [--server-like] [--profile] [--op-stats] [--idle-us N]
//
// For each concurrency c: c threads, each with its own CUDA stream (from c10's pool) and its own
// host buffers. Each iteration copies the input host->device, runs forward() under
// c10::InferenceMode, copies the output device->host and waits for its stream: the whole path a
// request takes through a server's backend. Host buffers are pinned (the fastest copies) unless
// --pageable. The threads share one module (TorchScript modules may be called from several
// threads at once), unless --module-per-thread. The first --warmup seconds of each concurrency
// are not measured. --server-like instead does what the pytorch backend's Execute does (pageable
// buffers, synchronous copies, NoGrad and optimizer guards, a contiguous output copied into a
// host buffer), to tell the backend's code from the server around it. --profile times forward()
// the way VRAMD_PYTORCH_PROFILE=1 does in the backend (stream synchronized before and after;
// wall time until it returns, until the GPU is done, its CPU time and context switches) and adds
// those means to the JSON, and prints once the node kinds of the graph run; --op-stats prints
// the operators with the most time at each concurrency (src/backends/pytorch/forward_probe.h).
// --idle-us N makes each thread sleep N us after each iteration, as a server's thread waits for
// its next request (latencies exclude the sleep): does the module run slower on a thread that
// went idle in between?
// One JSON line per concurrency, like infer_load's:
//   {"mode":"direct","device":"cuda:0","concurrency":c,"requests":n,"errors":0,"rps":x,
//    "p50_ms":..,"p90_ms":..,"p99_ms":..,"mean_ms":..,"duration_s":..}
// With --reference, first checks one output against the file (FP32 raw, e.g. make_model.py's
// output.bin, computed on a CPU) and prints {"check":..., "max_abs_err":..., "max_abs_ref":...};
// exits 4 when the error exceeds 2% of the reference's largest magnitude (TF32 convs on a GPU
// differ from the CPU at the 1e-3 level).
#include "../latency_summary.h"
#include "../../src/backends/pytorch/forward_probe.h"

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

#include <torch/csrc/jit/runtime/graph_executor.h>
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
  bool server_like = false;
  bool profile = false;
  bool op_stats = false;
  int idle_us = 0;
};

// --profile's sums over one thread's measured iterations.
struct ForwardTimes {
  long calls = 0;
  double returned_us = 0, done_us = 0, cpu_us = 0, voluntary = 0, involuntary = 0;
  void Add(const ForwardTimes& o) {
    calls += o.calls; returned_us += o.returned_us; done_us += o.done_us; cpu_us += o.cpu_us;
    voluntary += o.voluntary; involuntary += o.involuntary;
  }
};

[[noreturn]] void Usage(const std::string& why) {
  std::cerr << "direct_bench: " << why << "\n"
            << "usage: direct_bench --model model.pt --input input.bin --shape 1,3,112,112\n"
            << "       [--device cuda:0|cpu] [--concurrency 1,2,4] [--duration S] [--warmup S]\n"
            << "       [--reference output.bin] [--pageable] [--module-per-thread]\n"
            << "       [--server-like] [--profile] [--op-stats] [--idle-us N]\n";
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
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {  // --key=value
      args.push_back(a.substr(0, eq));
      args.push_back(a.substr(eq + 1));
    } else {
      args.push_back(a);
    }
  }
  const int n = static_cast<int>(args.size());
  for (int i = 0; i < n; ++i) {
    std::string a = args[i];
    if (a == "-h" || a == "--help") Usage("help");
    if (a == "--pageable") { o.pinned = false; continue; }
    if (a == "--module-per-thread") { o.module_per_thread = true; continue; }
    if (a == "--server-like") { o.server_like = true; o.pinned = false; continue; }
    if (a == "--profile") { o.profile = true; continue; }
    if (a == "--op-stats") { o.op_stats = true; continue; }
    if (i + 1 >= n) Usage("missing value for " + a);
    std::string v = args[++i];
    try {
      if (a == "--model") o.model = v;
      else if (a == "--input") o.input = v;
      else if (a == "--reference") o.reference = v;
      else if (a == "--shape") o.shape = ParseList<int64_t>(v);
      else if (a == "--device") o.device = v;
      else if (a == "--concurrency") o.concurrency = ParseList<int>(v);
      else if (a == "--duration") o.duration_s = std::stod(v);
      else if (a == "--warmup") o.warmup_s = std::stod(v);
      else if (a == "--idle-us") o.idle_us = std::stoi(v);
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

  static void SyncStream(const torch::Device& dev) {
#if DIRECT_WITH_CUDA
    if (dev.is_cuda()) c10::cuda::getCurrentCUDAStream(dev.index()).synchronize();
#endif
  }

  // forward() on `args`, timed into `times` when profiling (see --profile).
  static c10::IValue Forward(torch::jit::Module& m, const torch::Device& dev,
                             std::vector<torch::jit::IValue> args, ForwardTimes* times) {
    if (times == nullptr) return m.forward(std::move(args));
    SyncStream(dev);
    const auto t0 = Clock::now();
    const auto u0 = vramd::pytorch::probe::ThreadUsageNow();
    c10::IValue out = m.forward(std::move(args));
    const auto t1 = Clock::now();
    const auto u1 = vramd::pytorch::probe::ThreadUsageNow();
    SyncStream(dev);
    const auto t2 = Clock::now();
    auto us = [](auto a, auto b) { return std::chrono::duration<double, std::micro>(b - a).count(); };
    times->calls += 1;
    times->returned_us += us(t0, t1);
    times->done_us += us(t0, t2);
    times->cpu_us += u1.cpu_us - u0.cpu_us;
    times->voluntary += static_cast<double>(u1.voluntary_switches - u0.voluntary_switches);
    times->involuntary += static_cast<double>(u1.involuntary_switches - u0.involuntary_switches);
    return out;
  }

  // One request's path: H2D, forward, D2H, wait. Returns the host output tensor.
  static void Once(torch::jit::Module& m, const torch::Device& dev, const at::Tensor& host_in,
                   at::Tensor& host_out, bool sync_cuda, ForwardTimes* times = nullptr) {
    auto d_in = host_in.to(dev, /*non_blocking=*/true);
    auto out = Forward(m, dev, {d_in}, times).toTensor();
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

  // What the pytorch backend's Execute does with the same request (torch_model.cc): the
  // request's bytes wrapped and copied to the device synchronously, forward() under NoGrad and
  // the optimizer guard, the output made contiguous and copied into a pageable host buffer.
  static void OnceLikeServer(torch::jit::Module& m, const torch::Device& dev,
                             const at::Tensor& host_in, std::vector<char>& host_out,
                             ForwardTimes* times) {
    torch::NoGradGuard no_grad;
    torch::jit::GraphOptimizerEnabledGuard optimize(true);
    at::Tensor t = torch::from_blob(host_in.data_ptr(), host_in.sizes(),
                                    torch::TensorOptions().dtype(host_in.scalar_type()));
    if (dev.is_cuda()) t = t.to(dev, /*non_blocking=*/false, /*copy=*/true);
    at::Tensor out = Forward(m, dev, {t}, times).toTensor().contiguous();
    const size_t bytes = static_cast<size_t>(out.numel()) * out.element_size();
    if (host_out.size() != bytes) host_out.resize(bytes);
    torch::from_blob(host_out.data(), out.sizes(), torch::TensorOptions().dtype(out.scalar_type()))
        .copy_(out);
  }

  std::string Run(int c) {
    std::vector<std::vector<double>> lat(static_cast<size_t>(c));
    std::vector<ForwardTimes> times(static_cast<size_t>(c));
    std::string graph;  // thread 0's, after its loop
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
          std::vector<char> server_out;
          auto& mine = lat[static_cast<size_t>(t)];
          mine.reserve(1 << 16);
          ForwardTimes sums;
          for (;;) {
            auto t0 = Clock::now();
            if (t0 >= end) break;
            ForwardTimes one;
            ForwardTimes* timed = opt.profile ? &one : nullptr;
            if (opt.server_like) {
              OnceLikeServer(m, device, host_in, server_out, timed);
            } else {
              Once(m, device, host_in, host_out, device.is_cuda(), timed);
            }
            auto t1 = Clock::now();
            if (t0 >= begin && t1 <= end) {
              mine.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
              sums.Add(one);
            }
            if (opt.idle_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(opt.idle_us));
          }
          times[static_cast<size_t>(t)] = sums;
          if (t == 0 && opt.profile) graph = vramd::pytorch::probe::LastGraphSummary();
        } catch (const std::exception& e) {
          if (errors.fetch_add(1) == 0) std::cerr << "direct_bench: thread error: " << e.what() << "\n";
        }
      });
    }
    for (auto& th : threads) th.join();
    const vramd::bench::LatencySummary summary = vramd::bench::Summarize(lat, opt.duration_s);
    char profile[320] = "";
    if (opt.profile) {
      ForwardTimes all;
      for (const auto& t : times) all.Add(t);
      const double n = std::max<double>(1, static_cast<double>(all.calls));
      std::snprintf(profile, sizeof profile,
                    ",\"forward_returned_us\":%.1f,\"forward_done_us\":%.1f,\"forward_cpu_us\":%.1f,"
                    "\"forward_voluntary_switches\":%.2f,\"forward_involuntary_switches\":%.2f",
                    all.returned_us / n, all.done_us / n, all.cpu_us / n, all.voluntary / n,
                    all.involuntary / n);
      std::printf("graph run (thread 0, c=%d): %s\n", c, graph.c_str());
    }
    if (opt.op_stats) {
      std::printf("operators at c=%d (total us, calls, us/call):\n%s", c,
                  vramd::pytorch::probe::TakeOpStats(25).c_str());
    }
    char line[1024];
    std::snprintf(line, sizeof line,
                  "{\"mode\":\"direct\",\"device\":\"%s\",\"concurrency\":%d,\"errors\":%ld,%s,"
                  "\"duration_s\":%.3f,\"pinned\":%s,\"module_per_thread\":%s,\"server_like\":%s,"
                  "\"idle_us\":%d%s}",
                  device.str().c_str(), c, errors.load(), vramd::bench::JsonFields(summary).c_str(),
                  opt.duration_s, opt.pinned && device.is_cuda() ? "true" : "false",
                  opt.module_per_thread ? "true" : "false", opt.server_like ? "true" : "false",
                  opt.idle_us, profile);
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
    if (b.opt.op_stats) {
      vramd::pytorch::probe::StartOpStats();
      vramd::pytorch::probe::TakeOpStats(0);  // drop what warm-up counted
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
