#include "server/metrics/sleep_metrics.h"

#include <memory>
#include <string>
#include <vector>

namespace vramd::metrics {
namespace {

using Counters = runtime::SleepGate::Counters;

struct SleepFamily {
  const char* name;
  const char* help;
  MetricType type;
  double (*value)(const Counters&, runtime::SleepGate::State);
};

constexpr SleepFamily kFamilies[] = {
    {"vramd_model_sleeping", "Whether the model version is asleep (1) or awake (0).", kGauge,
     [](const Counters&, runtime::SleepGate::State state) {
       return state == runtime::SleepGate::State::kAsleep ||
                      state == runtime::SleepGate::State::kFallingAsleep
                  ? 1.0
                  : 0.0;
     }},
    {"vramd_model_sleeps_total", "Times the model version was put to sleep.", kCounter,
     [](const Counters& c, runtime::SleepGate::State) { return double(c.sleeps); }},
    {"vramd_model_wakes_total", "Times the model version was woken.", kCounter,
     [](const Counters& c, runtime::SleepGate::State) { return double(c.wakes); }},
    {"vramd_model_wake_failures_total",
     "Wakes of the model version that failed (it stayed asleep).", kCounter,
     [](const Counters& c, runtime::SleepGate::State) { return double(c.failed_wakes); }},
    {"vramd_model_sleep_seconds_total", "Time spent putting the model version to sleep.",
     kCounter, [](const Counters& c, runtime::SleepGate::State) { return c.sleep_seconds; }},
    {"vramd_model_wake_seconds_total", "Time spent waking the model version.", kCounter,
     [](const Counters& c, runtime::SleepGate::State) { return c.wake_seconds; }},
    {"vramd_model_last_wake_seconds", "How long the model version's last wake took.", kGauge,
     [](const Counters& c, runtime::SleepGate::State) { return c.last_wake_seconds; }},
};

}  // namespace

void AppendSleepMetrics(const runtime::ModelManager& manager, PrometheusText& out) {
  struct Row {
    std::string model, version;
    Counters counters;
    runtime::SleepGate::State state;
  };
  std::vector<Row> rows;
  for (const auto& version : manager.LoadedVersions()) {
    if (!version->CanSleep()) continue;
    const auto& gate = version->sleep_gate();
    rows.push_back({version->name(), std::to_string(version->version()), gate.counters(),
                    gate.state()});
  }
  for (const SleepFamily& family : kFamilies) {
    out.Family(family.name, family.help, family.type);
    for (const Row& row : rows) {
      out.Sample({{"model", row.model}, {"version", row.version}},
                 family.value(row.counters, row.state));
    }
  }
  out.Family("vramd_idle_sleeps_total",
             "Sleeps of models that went without a request for their vramd.sleep_after_idle.",
             kCounter);
  out.Sample({}, static_cast<double>(manager.sleep_keeper().idle_sleeps()));
  out.Family("vramd_pressure_sleeps_total",
             "Sleeps of idle models that made room for a load or a wake.", kCounter);
  out.Sample({}, static_cast<double>(manager.sleep_keeper().pressure_sleeps()));
  // Beside the sleeps: the other automatic lifecycle action (docs/rollback.md).
  out.Family("vramd_rollbacks_total",
             "Rollbacks of a model to the versions it served before its last reload, by the rule "
             "that fired (error_rate, p99_latency, gpu_utilization, oom, leak, manual, webhook).",
             kCounter);
  for (const auto& [key, count] : manager.RollbackCounts()) {
    out.Sample({{"model", key.first}, {"rule", key.second}}, count);
  }
}

}  // namespace vramd::metrics
