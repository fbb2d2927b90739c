// `vramctl memory` output, rendered from a fixed /v2/memory answer.
#include <gtest/gtest.h>

#include <string>

#include "server/metrics/lifecycle_text.h"
#include "server/metrics/memory_report_text.h"

namespace vramd::metrics {
namespace {

constexpr const char* kReport = R"json({
  "generated_at": "2026-01-02T03:04:05.678Z",
  "nvml": {"available": true, "reason": ""},
  "cuda": {"available": true, "reason": ""},
  "devices": [
    {"device": "cuda:0", "name": "NVIDIA H200", "uuid": "GPU-1234",
     "nvml": {"available": true, "reason": ""},
     "total_bytes": 150754820096, "used_bytes": 1288490188, "free_bytes": 149466329908,
     "driver_reserved_bytes": 536870912, "utilization_gpu_percent": 3,
     "process_used_bytes": 1073741824, "process_used_reason": "",
     "pool_reserved_bytes": 67108864, "pool_allocated_bytes": 41943040,
     "pool_peak_reserved_bytes": 83886080, "pool_peak_allocated_bytes": 50331648,
     "pool_segments": 4, "pool_fragmentation": 0.125,
     "context_baseline_bytes": 524288000, "context_baseline_reason": "",
     "unattributed_bytes": 482344960, "unattributed_reason": ""},
    {"device": "cuda:1", "name": "", "uuid": "",
     "nvml": {"available": false, "reason": "cuda:1: no NVML device at PCI bus id 0000:3b:00.0"},
     "total_bytes": null, "used_bytes": null, "free_bytes": null, "driver_reserved_bytes": null,
     "utilization_gpu_percent": null, "process_used_bytes": null,
     "process_used_reason": "cuda:1: pid 7 is not among the 2 compute process(es)",
     "pool_reserved_bytes": null, "pool_allocated_bytes": null, "pool_peak_reserved_bytes": null,
     "pool_peak_allocated_bytes": null, "pool_segments": null, "pool_fragmentation": null,
     "context_baseline_bytes": null, "context_baseline_reason": "NVML unavailable at start-up",
     "unattributed_bytes": null, "unattributed_reason": "no NVML figure for this process"}
  ],
  "pools": [
    {"device": "cpu", "reserved_bytes": 2097152, "allocated_bytes": 1024, "peak_reserved_bytes": 2097152,
     "peak_allocated_bytes": 4096, "segments": 1, "fragmentation": 0.0},
    {"device": "cuda:0", "reserved_bytes": 67108864, "allocated_bytes": 41943040,
     "peak_reserved_bytes": 83886080, "peak_allocated_bytes": 50331648, "segments": 4,
     "fragmentation": 0.125}
  ],
  "owners": {"id": 1, "kind": "server", "name": "server", "path": "server", "live_bytes": 0,
    "peak_bytes": 0, "subtree_live_bytes": 41944064, "closed": false, "by_device": {},
    "children": [
      {"id": 2, "kind": "model", "name": "add_sub", "path": "server/model:add_sub",
       "live_bytes": 0, "peak_bytes": 0, "subtree_live_bytes": 41944064, "closed": false,
       "by_device": {}, "children": [
         {"id": 3, "kind": "version", "name": "1", "path": "server/model:add_sub/version:1",
          "live_bytes": 1024, "peak_bytes": 1024, "subtree_live_bytes": 41944064,
          "closed": false, "by_device": {"cpu": 1024},
          "quota": [{"device": "cuda:0", "limit_bytes": 67108864, "used_bytes": 41943040,
                     "refusals": 2}],
          "execution_peaks": [{"device": "cuda:0", "batch_size": 1, "bytes": 1048576},
                              {"device": "cuda:0", "batch_size": 8, "bytes": 8388608}],
          "children": [
            {"id": 4, "kind": "instance", "name": "add_sub_0",
             "path": "server/model:add_sub/version:1/instance:add_sub_0",
             "live_bytes": 41943040, "peak_bytes": 50331648, "subtree_live_bytes": 41943040,
             "closed": true, "by_device": {"cuda:0": 41943040}, "children": []}]}]}]},
  "leaks": [
    {"owner": "server/model:add_sub/version:1/instance:add_sub_0", "owner_id": 4,
     "kind": "instance", "bytes": 41943040, "count": 2, "still_live_bytes": 41943040,
     "closed_at": "2026-01-02T03:04:00.000Z",
     "allocations": [
       {"address": "0x7f0000200000", "size": 33554432, "device": "cuda:0", "age_ms": 5678,
        "backtrace": ["libadd_sub.so(Load+0x42) [0x7f1]", "vramd(main+0x10) [0x401]"]},
       {"address": "0x7f0002200000", "size": 8388608, "device": "cuda:0", "age_ms": 10,
        "backtrace": []}]}
  ],
  "leaked_bytes_total": 41943040, "leak_reports_total": 1, "unknown_frees": 2,
  "unattributed": []
})json";

void ExpectLine(const std::string& text, const std::string& line) {
  EXPECT_NE(text.find(line + "\n"), std::string::npos) << "missing line:\n"
                                                      << line << "\nin:\n"
                                                      << text;
}

TEST(VramctlRenderTest, DevicesShowNvmlPoolContextAndUnattributedLines) {
  auto text = RenderMemoryReportText(kReport);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  ExpectLine(*text, "  cuda:0  NVIDIA H200  GPU-1234");
  ExpectLine(*text,
             "    nvml          total 140.4 GiB  used 1.2 GiB  free 139.2 GiB  driver reserved "
             "512.0 MiB  gpu 3%");
  ExpectLine(*text, "    this process  1.0 GiB");
  ExpectLine(*text,
             "    pool          reserved 64.0 MiB  allocated 40.0 MiB  peak 80.0 MiB  segments 4  "
             "fragmentation 0.12");
  ExpectLine(*text, "    context       500.0 MiB at start-up");
  ExpectLine(*text,
             "    unattributed  460.0 MiB = process 1.0 GiB - pool 64.0 MiB - context 500.0 MiB");
}

TEST(VramctlRenderTest, MissingFiguresShowTheirReasons) {
  auto text = RenderMemoryReportText(kReport);
  ASSERT_TRUE(text.ok());
  ExpectLine(*text, "  cuda:1");
  ExpectLine(*text, "    nvml          unavailable: cuda:1: no NVML device at PCI bus id 0000:3b:00.0");
  ExpectLine(*text, "    this process  unknown: cuda:1: pid 7 is not among the 2 compute process(es)");
  ExpectLine(*text, "    pool          none yet");
  ExpectLine(*text, "    context       unknown: NVML unavailable at start-up");
  ExpectLine(*text, "    unattributed  unknown: no NVML figure for this process");
}

TEST(VramctlRenderTest, OwnerTreeIsIndentedWithLivePeakAndSubtree) {
  auto text = RenderMemoryReportText(kReport);
  ASSERT_TRUE(text.ok());
  ExpectLine(*text,
             "  owner                                    live        peak     subtree  by device");
  ExpectLine(*text,
             "  server                                    0 B         0 B    40.0 MiB");
  ExpectLine(*text,
             "    model:add_sub                           0 B         0 B    40.0 MiB");
  ExpectLine(*text,
             "      version:1                         1.0 KiB     1.0 KiB    40.0 MiB  cpu 1.0 KiB; "
             "quota cuda:0 40.0 MiB of 64.0 MiB, 2 refused; per execution: cuda:0 batch 1 1.0 MiB, "
             "cuda:0 batch 8 8.0 MiB");
  ExpectLine(*text,
             "        instance:add_sub_0 (closed)    40.0 MiB    48.0 MiB    40.0 MiB  cuda:0 "
             "40.0 MiB");
}

TEST(VramctlRenderTest, LeaksListOwnerSizeCountAndBacktraceFrames) {
  auto text = RenderMemoryReportText(kReport);
  ASSERT_TRUE(text.ok());
  ExpectLine(*text, "Leaks: 1 report(s) listed, 40.0 MiB leaked in total, 2 unknown free(s)");
  ExpectLine(*text,
             "  server/model:add_sub/version:1/instance:add_sub_0 (instance): 40.0 MiB in 2 "
             "allocation(s), 40.0 MiB still live, closed 2026-01-02T03:04:00.000Z");
  ExpectLine(*text, "    0x7f0000200000 32.0 MiB on cuda:0, 5678 ms old");
  ExpectLine(*text, "      #0 libadd_sub.so(Load+0x42) [0x7f1]");
  ExpectLine(*text, "      #1 vramd(main+0x10) [0x401]");
  ExpectLine(*text, "    0x7f0002200000 8.0 MiB on cuda:0, 10 ms old");
  ExpectLine(*text, "      (no backtrace: start vramd with --memory-trace)");
}

TEST(VramctlRenderTest, ReportWithoutGpuSaysWhy) {
  auto text = RenderMemoryReportText(
      R"({"nvml":{"available":false,"reason":"NVML unavailable: cannot load libnvidia-ml.so.1"},
          "cuda":{"available":false,"reason":"built without CUDA: CPU only"},
          "devices":[],"pools":[],"owners":null,"leaks":[],"leaked_bytes_total":0,
          "unknown_frees":0})");
  ASSERT_TRUE(text.ok());
  ExpectLine(*text, "  no CUDA device: built without CUDA: CPU only");
  ExpectLine(*text, "  NVML unavailable: cannot load libnvidia-ml.so.1");
  ExpectLine(*text, "Leaks: 0 report(s) listed, 0 B leaked in total, 0 unknown free(s)");
}

TEST(VramctlRenderTest, NonJsonIsInvalidArgument) {
  auto text = RenderMemoryReportText("<html>502 Bad Gateway</html>");
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(RenderMemoryReportText("[1,2]").ok());
}

TEST(VramctlRenderTest, DeeplyNestedAnswersAreRefusedNotAStackOverflow) {
  const std::string deep(1'000'000, '[');
  for (const auto& text : {RenderMemoryReportText(deep), RenderLifecycleText(deep)}) {
    ASSERT_FALSE(text.ok());
    EXPECT_NE(text.status().message().find("nests deeper than 64 levels"), std::string::npos)
        << text.status().message();
  }
}

TEST(VramctlRenderTest, HumanBytesUsesPowersOf1024WithOneDecimal) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1024), "1.0 KiB");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes((int64_t{1} << 20) - 1), "1.0 MiB");
  EXPECT_EQ(HumanBytes(int64_t{3} << 30), "3.0 GiB");
  EXPECT_EQ(HumanBytes(-(int64_t{28} << 20)), "-28.0 MiB");
  EXPECT_EQ(HumanBytes(INT64_MIN), "-8.0 EiB");
}

TEST(VramctlRenderTest, LifecycleShowsStateLastLoadPhasesAndRecentTransitions) {
  const char* json = R"({"name": "big", "state": "ready", "reason": "", "serving": ["2"],
    "history": [
      {"from": "unloaded", "to": "loading", "reason": "first", "at_ms": 1000},
      {"from": "loading", "to": "ready", "reason": "", "at_ms": 2500},
      {"from": "ready", "to": "loading", "reason": "reload", "at_ms": 3000},
      {"from": "loading", "to": "ready", "reason": "", "at_ms": 4000}],
    "last_load": {"ok": true, "error": "", "versions": ["2"],
      "policy": "availability_preserving", "policy_reason": "the new versions fit",
      "predicted_bytes": {"cuda:0": 1342177280}, "predicted_from": "file sizes x 1.25",
      "measured_bytes": {"cuda:0": 1073741824},
      "phases": [{"name": "file_read", "seconds": 0.25, "bytes": 1073741824},
                 {"name": "h2d", "seconds": 0.02, "bytes": 1000000000},
                 {"name": "switch", "seconds": 0.00001, "bytes": 0}],
      "total_seconds": 0.9, "finished_ms": 4000}})";
  auto text = RenderLifecycleText(json, 3);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_NE(text->find("model 'big': ready"), std::string::npos) << *text;
  EXPECT_NE(text->find("serving versions: 2"), std::string::npos) << *text;
  EXPECT_NE(text->find("succeeded, 0.900 s, availability_preserving"), std::string::npos)
      << *text;
  EXPECT_NE(text->find("cuda:0 1.2 GiB (from file sizes x 1.25)"), std::string::npos) << *text;
  EXPECT_NE(text->find("measured:  cuda:0 1.0 GiB"), std::string::npos) << *text;
  EXPECT_NE(text->find("h2d"), std::string::npos);
  EXPECT_NE(text->find("50.0 GB/s"), std::string::npos) << *text;  // 1e9 bytes in 0.02 s
  EXPECT_NE(text->find("transitions (last 3 of 4)"), std::string::npos) << *text;
  EXPECT_EQ(text->find("first"), std::string::npos) << *text;  // the oldest row is cut
  EXPECT_NE(text->find("00:00:03.000Z ready -> loading: reload"), std::string::npos) << *text;
}

TEST(VramctlRenderTest, LifecycleOfAFailedModelWithoutLoadAndBadJson) {
  auto failed = RenderLifecycleText(
      R"({"name": "m", "state": "failed", "reason": "bad weights", "serving": [],
          "history": [], "last_load": {"ok": false, "error": "bad weights", "versions": ["1"]}})");
  ASSERT_TRUE(failed.ok());
  EXPECT_NE(failed->find("model 'm': failed (bad weights)"), std::string::npos) << *failed;
  EXPECT_NE(failed->find("serving versions: none"), std::string::npos) << *failed;
  EXPECT_NE(failed->find("failed: bad weights"), std::string::npos) << *failed;
  auto never = RenderLifecycleText(R"({"name": "m", "state": "unloaded", "last_load": null})");
  ASSERT_TRUE(never.ok());
  EXPECT_NE(never->find("last load: none"), std::string::npos) << *never;
  EXPECT_EQ(RenderLifecycleText("not json").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vramd::metrics
