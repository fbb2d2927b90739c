#include "server/trace/trace_settings.h"

#include <gtest/gtest.h>

#include "core/request_trace.h"
#include "server/trace/otlp_post.h"
#include "server/trace/tracer.h"

namespace vramd::trace {
namespace {

TraceSettings::Changes Set(std::string name, std::string value) {
  return {{std::move(name), std::vector<std::string>{std::move(value)}}};
}

std::string AnswerOf(const TraceSettings& s, std::string_view model, std::string_view name) {
  for (const auto& [n, v] : s.Answer(model)) {
    if (n == name) return v.empty() ? "" : v.front();
  }
  return "<missing>";
}

TEST(TraceSettingsTest, OffSamplesNothing) {
  TraceSettings s(TraceMode::kTriton);
  EXPECT_FALSE(s.any_on());
  for (int i = 0; i < 2000; ++i) EXPECT_FALSE(s.Sample("m", false));
}

TEST(TraceSettingsTest, RateTakesEveryNthRequest) {
  TraceSettings s(TraceMode::kTriton);
  ASSERT_TRUE(s.Update("", Set("trace_level", "TIMESTAMPS")).ok());
  ASSERT_TRUE(s.Update("", Set("trace_rate", "4")).ok());
  int taken = 0;
  for (int i = 0; i < 40; ++i) taken += s.Sample("m", false) ? 1 : 0;
  EXPECT_EQ(taken, 10);
}

TEST(TraceSettingsTest, CountStopsTracingAndCountsDown) {
  TraceSettings s(TraceMode::kTriton);
  ASSERT_TRUE(s.Update("", {{"trace_level", std::vector<std::string>{"TIMESTAMPS"}},
                           {"trace_rate", std::vector<std::string>{"1"}},
                           {"trace_count", std::vector<std::string>{"3"}}})
                  .ok());
  int taken = 0;
  for (int i = 0; i < 10; ++i) taken += s.Sample("m", false) ? 1 : 0;
  EXPECT_EQ(taken, 3);
  EXPECT_EQ(AnswerOf(s, "", "trace_count"), "0");
}

TEST(TraceSettingsTest, ModelSettingsCopyGlobalAndClearBackToIt) {
  TraceSettings s(TraceMode::kTriton);
  ASSERT_TRUE(s.Update("", Set("trace_rate", "9")).ok());
  ASSERT_TRUE(s.Update("m", Set("trace_level", "TIMESTAMPS")).ok());
  EXPECT_EQ(AnswerOf(s, "m", "trace_rate"), "9");
  EXPECT_EQ(AnswerOf(s, "m", "trace_level"), "TIMESTAMPS");
  EXPECT_EQ(AnswerOf(s, "", "trace_level"), "OFF");
  EXPECT_TRUE(s.any_on());  // a model traces though the global level is off
  EXPECT_FALSE(s.Sample("other", false));
  ASSERT_TRUE(s.Update("m", {{"trace_level", std::nullopt}}).ok());
  EXPECT_EQ(AnswerOf(s, "m", "trace_level"), "OFF");
  EXPECT_FALSE(s.any_on());
}

TEST(TraceSettingsTest, RefusalsChangeNothing) {
  TraceSettings s(TraceMode::kTriton);
  ASSERT_TRUE(s.Update("", Set("trace_rate", "5")).ok());
  for (const auto& changes :
       {Set("trace_level", "TENSORS"), Set("trace_rate", "-1"), Set("trace_count", "-2"),
        Set("trace_rate", "1x"), Set("trace_mode", "triton"), Set("nope", "1"),
        TraceSettings::Changes{{"trace_rate", std::vector<std::string>{"1"}},
                               {"trace_level", std::vector<std::string>{"LOUD"}}},
        TraceSettings::Changes{{"trace_rate", std::nullopt}}}) {
    Status st = s.Update("", changes);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << changes.front().first;
  }
  EXPECT_EQ(AnswerOf(s, "", "trace_rate"), "5");
}

TEST(TraceSettingsTest, ParentContextIsTracedWhateverTheRate) {
  TraceSettings s(TraceMode::kOpenTelemetry);
  ASSERT_TRUE(s.Update("", {{"trace_level", std::vector<std::string>{"TIMESTAMPS"}},
                           {"trace_rate", std::vector<std::string>{"0"}}})
                  .ok());
  EXPECT_FALSE(s.Sample("m", false));
  EXPECT_TRUE(s.Sample("m", true));
}

TEST(TraceSettingsTest, FlagsParse) {
  auto options = TracerOptions::FromFlags({"level=TIMESTAMPS", "rate=10", "triton,file=/tmp/t",
                                           "triton,log-frequency=5", "count=7"});
  ASSERT_TRUE(options.ok()) << options.status().message();
  EXPECT_TRUE(options->global.timestamps);
  EXPECT_EQ(options->global.rate, 10u);
  EXPECT_EQ(options->global.count, 7);
  EXPECT_EQ(options->global.log_frequency, 5u);
  EXPECT_EQ(options->global.file, "/tmp/t");
  auto otel = TracerOptions::FromFlags({"mode=opentelemetry", "opentelemetry,url=http://c:4318/v1/traces",
                                        "opentelemetry,resource=service.name=x",
                                        "opentelemetry,bsp_schedule_delay=20"});
  ASSERT_TRUE(otel.ok()) << otel.status().message();
  EXPECT_EQ(otel->mode, TraceMode::kOpenTelemetry);
  EXPECT_EQ(otel->schedule_delay.count(), 20);
  ASSERT_EQ(otel->resource.size(), 1u);
  EXPECT_EQ(otel->resource[0].second, "x");
  for (const char* bad : {"level=LOUD", "rate", "speed=1", "zipkin,url=x", "triton,url=x",
                          "opentelemetry,bsp_max_export_batch_size=0", "mode=jaeger"}) {
    EXPECT_FALSE(TracerOptions::FromFlags({bad}).ok()) << bad;
  }
}

TEST(OtlpPostTest, ParsesCollectorUrls) {
  auto e = ParseHttpEndpoint("http://collector:4318/v1/traces");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->host, "collector");
  EXPECT_EQ(e->port, "4318");
  EXPECT_EQ(e->path, "/v1/traces");
  auto bare = ParseHttpEndpoint("http://[::1]");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->host, "::1");
  EXPECT_EQ(bare->port, "80");
  EXPECT_EQ(bare->path, "/");
  for (const char* bad : {"https://c/v1/traces", "c:4318", "http://:4318/x", "http://c:43a8/x"}) {
    EXPECT_FALSE(ParseHttpEndpoint(bad).ok()) << bad;
  }
  EXPECT_FALSE(TracerOptions::FromFlags({"mode=opentelemetry", "opentelemetry,url=ftp://c"}).ok());
}

TEST(OtlpPostTest, AnUnreachableCollectorIsAnErrorNamingTheStep) {
  auto e = ParseHttpEndpoint("http://127.0.0.1:1/v1/traces");
  ASSERT_TRUE(e.ok());
  Status s = PostJson(*e, "{}", std::chrono::milliseconds(2000));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("connect"), std::string::npos) << s.message();
}

TEST(TraceContextTest, ParsesW3cTraceparent) {
  auto c = TraceContext::Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->TraceIdHex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(c->SpanIdHex(), "00f067aa0ba902b7");
  EXPECT_EQ(c->flags, 1);
  // A later version may carry more fields after its four.
  EXPECT_TRUE(TraceContext::Parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz"));
  for (const char* bad : {"", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
                          "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                          "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                          "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
                          "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}) {
    EXPECT_FALSE(TraceContext::Parse(bad).has_value()) << bad;
  }
}

TEST(RequestTraceTest, FirstStampWinsAndSpansNest) {
  auto parent = TraceContext::Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  RequestTrace t(7, "m", TraceProtocol::kHttp, parent);
  const auto t0 = RequestTrace::Clock::now();
  t.Stamp(TracePoint::kReceiveStart, t0);
  t.Stamp(TracePoint::kQueueStart, t0 + std::chrono::microseconds(10));
  t.Stamp(TracePoint::kComputeStart, t0 + std::chrono::microseconds(20));
  t.Stamp(TracePoint::kComputeStart, t0 + std::chrono::microseconds(99));  // ignored
  t.Stamp(TracePoint::kComputeEnd, t0 + std::chrono::microseconds(30));
  t.Stamp(TracePoint::kSendEnd, t0 + std::chrono::microseconds(40));
  t.SetVersion(3);
  auto spans = RequestSpans(t);
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[0].name, "InferRequest");
  EXPECT_EQ(HexOf(spans[0].parent_span_id.data(), 8), "00f067aa0ba902b7");
  EXPECT_EQ(spans[0].end_unix_ns - spans[0].start_unix_ns, 40000u);
  EXPECT_EQ(spans[1].name, "queue");
  EXPECT_EQ(spans[1].end_unix_ns - spans[1].start_unix_ns, 10000u);
  EXPECT_EQ(spans[2].name, "compute");
  EXPECT_EQ(spans[2].end_unix_ns - spans[2].start_unix_ns, 10000u);
  EXPECT_EQ(spans[2].parent_span_id, spans[0].span_id);
  const std::string json = EncodeOtlpJson(spans, {{"service.name", "vramd"}});
  EXPECT_NE(json.find("\"traceId\":\"4bf92f3577b34da6a3ce929d0e0e4736\""), std::string::npos);
  EXPECT_NE(json.find("\"name\":\"COMPUTE_START\""), std::string::npos);
}

TEST(RequestTraceTest, FiguresAreReplacedByNameAndKeptUpToTheirRoom) {
  RequestTrace t(1, "m", TraceProtocol::kHttp, std::nullopt);
  t.SetFigure("a", 1);
  t.SetFigure("b", 2);
  t.SetFigure("a", 3);  // replaces
  const char* more[] = {"c", "d", "e", "f"};
  for (const char* name : more) t.SetFigure(name, 9);
  const auto figures = t.Read().figures;
  ASSERT_EQ(figures.size(), RequestTrace::kMaxFigures);
  EXPECT_EQ(std::string(figures[0].first), "a");
  EXPECT_EQ(figures[0].second, 3u);
  EXPECT_EQ(figures[1].second, 2u);
  EXPECT_EQ(std::string(figures[3].first), "d");  // "e" and "f" found no room
}

}  // namespace
}  // namespace vramd::trace
