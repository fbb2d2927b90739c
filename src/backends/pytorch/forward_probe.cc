#include "forward_probe.h"

#include <ATen/record_function.h>
#include <sys/resource.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace vramd::pytorch::probe {

ThreadUsage ThreadUsageNow() {
  ThreadUsage usage;
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0) {
    usage.cpu_us = static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
  }
  rusage ru{};
  if (getrusage(RUSAGE_THREAD, &ru) == 0) {
    usage.voluntary_switches = ru.ru_nvcsw;
    usage.involuntary_switches = ru.ru_nivcsw;
  }
  return usage;
}

namespace {

using Clock = std::chrono::steady_clock;

struct OpRow {
  long calls = 0;
  double total_us = 0;
};

struct OpTable {
  std::mutex mu;
  std::map<std::string, OpRow> rows;  // guarded by mu
};

OpTable& Table() {
  static auto* table = new OpTable;  // lives as long as the callback that may still run
  return *table;
}

struct StartTime : at::ObserverContext {
  Clock::time_point at;
};

std::unique_ptr<at::ObserverContext> OnOpStart(const at::RecordFunction&) {
  auto ctx = std::make_unique<StartTime>();
  ctx->at = Clock::now();
  return ctx;
}

void OnOpEnd(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  if (ctx == nullptr) return;
  const double us =
      std::chrono::duration<double, std::micro>(Clock::now() - static_cast<StartTime*>(ctx)->at)
          .count();
  OpTable& table = Table();
  std::lock_guard lock(table.mu);
  OpRow& row = table.rows[fn.name()];
  row.calls += 1;
  row.total_us += us;
}

void CountKinds(const torch::jit::Block* block, const std::string& prefix,
                std::map<std::string, int>* kinds) {
  for (const torch::jit::Node* node : block->nodes()) {
    const std::string kind = node->kind().toQualString();
    (*kinds)[prefix + kind] += 1;
    for (const torch::jit::Block* sub : node->blocks()) CountKinds(sub, prefix, kinds);
    // Fusion groups carry their operators in a subgraph; those are what the fused kernel does.
    if (node->hasAttribute(torch::jit::attr::Subgraph) && kind.find("Group") != std::string::npos) {
      CountKinds(node->g(torch::jit::attr::Subgraph)->block(), prefix + "fused:", kinds);
    }
  }
}

}  // namespace

void StartOpStats() {
  static std::once_flag once;
  std::call_once(once, [] {
    at::addGlobalCallback(at::RecordFunctionCallback(&OnOpStart, &OnOpEnd)
                              .needsInputs(false)
                              .scopes({at::RecordScope::FUNCTION}));
  });
}

std::string TakeOpStats(size_t top) {
  std::vector<std::pair<std::string, OpRow>> rows;
  {
    OpTable& table = Table();
    std::lock_guard lock(table.mu);
    rows.assign(table.rows.begin(), table.rows.end());
    table.rows.clear();
  }
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.total_us > b.second.total_us; });
  std::string out;
  char line[256];
  for (size_t i = 0; i < rows.size() && i < top; ++i) {
    const OpRow& r = rows[i].second;
    std::snprintf(line, sizeof line, "%12.0f %8ld %9.2f %s\n", r.total_us, r.calls,
                  r.total_us / static_cast<double>(r.calls), rows[i].first.c_str());
    out += line;
  }
  return out;
}

std::string LastGraphSummary() {
  const std::shared_ptr<torch::jit::Graph> graph = torch::jit::lastExecutedOptimizedGraph();
  if (!graph) return "none";
  std::map<std::string, int> kinds;
  CountKinds(graph->block(), "", &kinds);
  std::vector<std::pair<std::string, int>> sorted(kinds.begin(), kinds.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (const auto& [kind, count] : sorted) {
    out += (out.empty() ? "" : ", ") + kind + " x" + std::to_string(count);
  }
  return out;
}

}  // namespace vramd::pytorch::probe
