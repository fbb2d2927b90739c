// GenerateAnswer (generate_answer.h) against fake response streams: what each sequence of
// responses makes of the HTTP answer, part by part.
#include "server/http/generate_answer.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "core/tensor.h"

namespace vramd::http {
namespace {

constexpr const char* kEventStream = "text/event-stream; charset=utf-8";

struct Recorder {
  std::vector<HttpResponse> parts;
  Responder responder() {
    return [this](HttpResponse r) { parts.push_back(std::move(r)); };
  }
  // The body as a client reads it.
  std::string body() const {
    std::string s;
    for (const auto& p : parts) s += p.body;
    return s;
  }
};

InferResponse Text(const std::string& text) {
  std::string data;
  AppendBytesElement(&data, text);
  Tensor t;
  t.name = "text_output";
  t.datatype = DataType::kBytes;
  t.shape = {1};
  t.data = SharedBuffer::FromString(std::move(data));
  InferResponse r;
  r.outputs.push_back(std::move(t));
  return r;
}

TEST(GenerateAnswerTest, StreamSendsOneEventPerResponseAndEndsOnTheFinalFlag) {
  Recorder rec;
  GenerateAnswer answer(rec.responder(), /*streaming=*/true, "llm");
  answer.SetDecoupled(true);
  answer.OnResponse(Text("Hel"), 2);
  ASSERT_EQ(rec.parts.size(), 1u);  // sent as it arrives
  EXPECT_EQ(rec.parts[0].status, 200u);
  EXPECT_EQ(rec.parts[0].content_type, kEventStream);
  EXPECT_TRUE(rec.parts[0].more);
  answer.OnResponse(Text("lo"), 2);
  InferResponse final_only;
  answer.Finish(Status::Ok(), &final_only, 2);
  ASSERT_EQ(rec.parts.size(), 3u);
  EXPECT_TRUE(rec.parts[1].more);
  EXPECT_FALSE(rec.parts[2].more);
  EXPECT_EQ(rec.body(),
            "data: {\"model_name\":\"llm\",\"model_version\":\"2\",\"text_output\":\"Hel\"}\n\n"
            "data: {\"model_name\":\"llm\",\"model_version\":\"2\",\"text_output\":\"lo\"}\n\n");
}

TEST(GenerateAnswerTest, AnErrorMidStreamIsAnErrorEventUnderThe200) {
  Recorder rec;
  GenerateAnswer answer(rec.responder(), true, "llm");
  answer.SetDecoupled(true);
  answer.OnResponse(Text("a"), 1);
  answer.OnResponse(Status::Internal("model failed"), 1);
  answer.Finish(Status::Ok(), nullptr, 1);
  EXPECT_EQ(rec.parts[0].status, 200u);
  EXPECT_NE(rec.body().find("data: {\"error\":\"model failed\"}\n\n"), std::string::npos)
      << rec.body();
  EXPECT_FALSE(rec.parts.back().more);
}

TEST(GenerateAnswerTest, AFirstErrorResponseMakesTheStream400) {
  Recorder rec;
  GenerateAnswer answer(rec.responder(), true, "llm");
  answer.SetDecoupled(true);
  answer.OnResponse(Status::InvalidArgument("bad prompt"), 1);
  answer.Finish(Status::Ok(), nullptr, 1);
  EXPECT_EQ(rec.parts[0].status, 400u);
  EXPECT_EQ(rec.parts[0].content_type, kEventStream);
  EXPECT_EQ(rec.body(), "data: {\"error\":\"bad prompt\"}\n\n");
}

TEST(GenerateAnswerTest, AFailureBeforeAnyEventIsAPlainJsonError) {
  Recorder rec;
  GenerateAnswer answer(rec.responder(), true, "llm");
  answer.Finish(Status::NotFound("unknown model 'llm'"), nullptr, 0);
  ASSERT_EQ(rec.parts.size(), 1u);
  EXPECT_EQ(rec.parts[0].status, 404u);
  EXPECT_EQ(rec.parts[0].content_type, "application/json");
  EXPECT_FALSE(rec.parts[0].more);
  EXPECT_EQ(rec.parts[0].body, "{\"error\":\"unknown model 'llm'\"}");
}

TEST(GenerateAnswerTest, AFailureAfterEventsIsTheLastEvent) {
  Recorder rec;
  GenerateAnswer answer(rec.responder(), true, "llm");
  answer.SetDecoupled(true);
  answer.OnResponse(Text("a"), 1);
  answer.Finish(Status::Unavailable("model unloaded"), nullptr, 1);
  EXPECT_FALSE(rec.parts.back().more);
  EXPECT_NE(rec.body().find("data: {\"error\":\"model unloaded\"}\n\n"), std::string::npos);
}

TEST(GenerateAnswerTest, ADecoupledModelWithNoResponseGivesAnEmpty200Stream) {
  Recorder rec;
  GenerateAnswer answer(rec.responder(), true, "llm");
  answer.SetDecoupled(true);
  answer.Finish(Status::Ok(), nullptr, 1);
  ASSERT_EQ(rec.parts.size(), 1u);
  EXPECT_EQ(rec.parts[0].status, 200u);
  EXPECT_EQ(rec.parts[0].content_type, kEventStream);
  EXPECT_EQ(rec.parts[0].body, "");
}

TEST(GenerateAnswerTest, ANonDecoupledModelsResponseIsTheOneEvent) {
  Recorder rec;
  GenerateAnswer answer(rec.responder(), true, "llm");
  InferResponse r = Text("all");
  answer.Finish(Status::Ok(), &r, 4);
  ASSERT_EQ(rec.parts.size(), 2u);  // the event, then the end: a chunked stream still
  EXPECT_TRUE(rec.parts[0].more);
  EXPECT_FALSE(rec.parts[1].more);
  EXPECT_EQ(rec.body(),
            "data: {\"model_name\":\"llm\",\"model_version\":\"4\",\"text_output\":\"all\"}\n\n");
}

TEST(GenerateAnswerTest, GenerateAnswersOneJsonObject) {
  Recorder rec;
  GenerateAnswer answer(rec.responder(), /*streaming=*/false, "llm");
  InferResponse r = Text("out");
  answer.Finish(Status::Ok(), &r, 1);
  ASSERT_EQ(rec.parts.size(), 1u);
  EXPECT_EQ(rec.parts[0].status, 200u);
  EXPECT_EQ(rec.parts[0].content_type, "application/json");
  EXPECT_FALSE(rec.parts[0].more);
  EXPECT_EQ(rec.parts[0].body,
            "{\"model_name\":\"llm\",\"model_version\":\"1\",\"text_output\":\"out\"}");
}

TEST(GenerateAnswerTest, GenerateOnADecoupledModelNeedsExactlyOneResponse) {
  {
    Recorder rec;
    GenerateAnswer answer(rec.responder(), false, "llm");
    answer.SetDecoupled(true);
    answer.OnResponse(Text("only"), 1);
    EXPECT_TRUE(rec.parts.empty());  // not before the end: a second one would be an error
    answer.Finish(Status::Ok(), nullptr, 1);
    ASSERT_EQ(rec.parts.size(), 1u);
    EXPECT_EQ(rec.parts[0].status, 200u);
    EXPECT_NE(rec.parts[0].body.find("\"text_output\":\"only\""), std::string::npos);
  }
  for (int responses : {0, 2}) {
    Recorder rec;
    GenerateAnswer answer(rec.responder(), false, "llm");
    answer.SetDecoupled(true);
    for (int i = 0; i < responses; ++i) answer.OnResponse(Text("x"), 1);
    answer.Finish(Status::Ok(), nullptr, 1);
    ASSERT_EQ(rec.parts.size(), 1u);
    EXPECT_EQ(rec.parts[0].status, 500u);
    EXPECT_EQ(rec.parts[0].body,
              "{\"error\":\"generate expects model to produce exactly 1 response, use generate "
              "stream for model that generates various number of responses\"}");
  }
}

TEST(GenerateAnswerTest, GenerateReportsTheOneResponsesError) {
  Recorder rec;
  GenerateAnswer answer(rec.responder(), false, "llm");
  answer.SetDecoupled(true);
  answer.OnResponse(Status::InvalidArgument("too long"), 1);
  answer.Finish(Status::Ok(), nullptr, 1);
  ASSERT_EQ(rec.parts.size(), 1u);
  EXPECT_EQ(rec.parts[0].status, 400u);
  EXPECT_EQ(rec.parts[0].body, "{\"error\":\"too long\"}");
}

TEST(GenerateAnswerTest, NothingAfterTheEnd) {
  Recorder rec;
  GenerateAnswer answer(rec.responder(), true, "llm");
  answer.SetDecoupled(true);
  answer.Finish(Status::Ok(), nullptr, 1);
  answer.OnResponse(Text("late"), 1);
  answer.Finish(Status::Ok(), nullptr, 1);
  EXPECT_EQ(rec.parts.size(), 1u);
}

TEST(GenerateAnswerTest, ResponsesFromAnInstanceThreadKeepTheirOrder) {
  Recorder rec;
  GenerateAnswer answer(rec.responder(), true, "llm");
  answer.SetDecoupled(true);
  std::thread instance([&] {
    for (int i = 0; i < 50; ++i) answer.OnResponse(Text(std::to_string(i)), 1);
    answer.Finish(Status::Ok(), nullptr, 1);
  });
  instance.join();
  ASSERT_EQ(rec.parts.size(), 51u);
  std::string expected;
  for (int i = 0; i < 50; ++i) {
    expected += "data: {\"model_name\":\"llm\",\"model_version\":\"1\",\"text_output\":\"" +
                std::to_string(i) + "\"}\n\n";
  }
  EXPECT_EQ(rec.body(), expected);
}

}  // namespace
}  // namespace vramd::http
