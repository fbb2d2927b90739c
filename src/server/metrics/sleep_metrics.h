// vramd's metrics of sleeping models (docs/memory.md, "Sleeping models"; docs/metrics.md).
//
// Per version of a model that can sleep, labels {model, version}:
//   vramd_model_sleeping                gauge    1 while asleep (or falling asleep), else 0
//   vramd_model_sleeps_total            counter  sleeps done
//   vramd_model_wakes_total             counter  wakes done
//   vramd_model_wake_failures_total     counter  wakes that failed (the model stayed asleep)
//   vramd_model_sleep_seconds_total     counter  time spent putting it to sleep
//   vramd_model_wake_seconds_total      counter  time spent waking it
//   vramd_model_last_wake_seconds       gauge    how long its last wake took
// Server-wide: vramd_idle_sleeps_total and vramd_pressure_sleeps_total (counters): sleeps
// the idle time and memory pressure caused (sleep_keeper.h).
//
// Thread safety: safe from any thread.
#pragma once

#include "runtime/model_manager.h"
#include "server/metrics/prometheus_text.h"

namespace vramd::metrics {

void AppendSleepMetrics(const runtime::ModelManager& manager, PrometheusText& out);

}  // namespace vramd::metrics
