#include "server/metrics/prometheus_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

namespace vramd::metrics {
namespace {

TEST(PrometheusTextTest, FamilyWritesHelpThenTypeThenSamples) {
  PrometheusText out;
  out.Family("vramd_pool_reserved_bytes", "Bytes held.", kGauge);
  out.Sample({{"device", "cuda:0"}}, 2097152);
  out.Sample({{"device", "cpu"}}, 0);
  EXPECT_EQ(out.text(),
            "# HELP vramd_pool_reserved_bytes Bytes held.\n"
            "# TYPE vramd_pool_reserved_bytes gauge\n"
            "vramd_pool_reserved_bytes{device=\"cuda:0\"} 2097152\n"
            "vramd_pool_reserved_bytes{device=\"cpu\"} 0\n");
}

TEST(PrometheusTextTest, CounterWithoutLabelsHasNoBraces) {
  PrometheusText out;
  out.Family("vramd_memory_leak_reports_total", "Leak reports.", kCounter);
  out.Sample({}, uint64_t{3});
  EXPECT_EQ(out.Take(),
            "# HELP vramd_memory_leak_reports_total Leak reports.\n"
            "# TYPE vramd_memory_leak_reports_total counter\n"
            "vramd_memory_leak_reports_total 3\n");
}

TEST(PrometheusTextTest, SeveralLabelsAreCommaSeparatedInOrder) {
  PrometheusText out;
  out.Family("m", "h", kUntyped);
  out.Sample({{"model", "add_sub"}, {"version", "1"}, {"instance", ""}}, int64_t{-5});
  EXPECT_NE(out.text().find("# TYPE m untyped\n"), std::string::npos);
  EXPECT_NE(out.text().find("m{model=\"add_sub\",version=\"1\",instance=\"\"} -5\n"),
            std::string::npos);
}

TEST(PrometheusTextTest, LabelValuesEscapeBackslashQuoteAndNewline) {
  EXPECT_EQ(EscapeLabelValue(R"(a\b"c)" "\n" "d"), R"(a\\b\"c\nd)");
  PrometheusText out;
  out.Family("m", "h", kGauge);
  out.Sample({{"model", "we\"ird\\name\n"}}, 1);
  EXPECT_NE(out.text().find("m{model=\"we\\\"ird\\\\name\\n\"} 1\n"), std::string::npos)
      << out.text();
}

TEST(PrometheusTextTest, HelpEscapesBackslashAndNewlineButNotQuotes) {
  EXPECT_EQ(EscapeHelp("a \"quoted\" \\ path\nnext"), "a \"quoted\" \\\\ path\\nnext");
  PrometheusText out;
  out.Family("m", "line one\nline two", kGauge);
  EXPECT_EQ(out.text(), "# HELP m line one\\nline two\n# TYPE m gauge\n");
}

TEST(PrometheusTextTest, IntegersAreExactAndDoublesShortest) {
  PrometheusText out;
  out.Family("m", "h", kGauge);
  out.Sample({}, std::numeric_limits<uint64_t>::max());
  out.Sample({}, std::numeric_limits<int64_t>::min());
  out.Sample({}, 0.25);
  out.Sample({}, 0.1);
  out.Sample({}, 1e21);
  EXPECT_NE(out.text().find("m 18446744073709551615\n"), std::string::npos);
  EXPECT_NE(out.text().find("m -9223372036854775808\n"), std::string::npos);
  EXPECT_NE(out.text().find("m 0.25\n"), std::string::npos);
  EXPECT_NE(out.text().find("m 0.1\n"), std::string::npos);
  EXPECT_NE(out.text().find("m 1e+21\n"), std::string::npos) << out.text();
}

TEST(PrometheusTextTest, SpecialFloatsAreSpelledAsTheFormatSays) {
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(0.0), "0");
  EXPECT_EQ(FormatValue(3.0), "3");
}

TEST(PrometheusTextTest, VectorLabelsMatchInitializerListLabels) {
  PrometheusText a, b;
  a.Family("m", "h", kGauge);
  b.Family("m", "h", kGauge);
  std::string device = "cuda:1";
  a.Sample({{"device", device}}, 0.5);
  b.Sample(std::vector<Label>{{"device", device}}, 0.5);
  EXPECT_EQ(a.text(), b.text());
}

}  // namespace
}  // namespace vramd::metrics
