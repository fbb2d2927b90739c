// Triton's restricted APIs: the flag's syntax and its refusals, the headers each protocol
// reads, and which category each HTTP endpoint belongs to.
#include "server/access/restricted_apis.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/http/kserve_routes.h"

namespace vramd::server {
namespace {

using ::testing::HasSubstr;

TEST(RestrictedApisTest, RestrictsTheNamedCategoriesBehindOneHeader) {
  RestrictedApis apis;
  EXPECT_TRUE(apis.empty());
  ASSERT_TRUE(apis.Add("--http-restricted-api", "model-repository, inference:Admin-Key=a=b:c", "")
                  .ok());
  ASSERT_TRUE(apis.Add("--http-restricted-api", "health:other=x", "").ok());
  EXPECT_FALSE(apis.empty());
  const auto* repo = apis.Find(ApiCategory::kModelRepository);
  ASSERT_NE(repo, nullptr);
  EXPECT_EQ(repo->header, "admin-key");  // compared without case over HTTP
  EXPECT_EQ(repo->value, "a=b:c");       // the value is everything after the first '='
  ASSERT_NE(apis.Find(ApiCategory::kInference), nullptr);
  EXPECT_EQ(apis.Find(ApiCategory::kInference)->value, "a=b:c");
  EXPECT_EQ(apis.Find(ApiCategory::kHealth)->header, "other");
  EXPECT_EQ(apis.Find(ApiCategory::kMetadata), nullptr);
  EXPECT_TRUE(apis.ReadsHeader("other"));
  EXPECT_TRUE(apis.ReadsHeader("Admin-Key"));
  EXPECT_FALSE(apis.ReadsHeader("admin"));
  EXPECT_EQ(apis.Summary(),
            "health (header 'other'), inference (header 'admin-key'), model-repository (header "
            "'admin-key')");
  EXPECT_EQ(RestrictedApis::RefusalMessage(*repo, /*grpc=*/false),
            "This API is restricted, expecting header 'admin-key'");
}

TEST(RestrictedApisTest, GrpcHeadersCarryTritonsPrefixInLowercase) {
  RestrictedApis apis;
  ASSERT_TRUE(apis.Add("--grpc-restricted-protocol", "inference:Infer-Key=V1",
                       kGrpcRestrictionPrefix)
                  .ok());
  const auto* r = apis.Find(ApiCategory::kInference);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->header, "triton-grpc-protocol-infer-key");
  EXPECT_EQ(r->value, "V1");  // values keep their case
  EXPECT_EQ(RestrictedApis::RefusalMessage(*r, /*grpc=*/true),
            "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'");
}

TEST(RestrictedApisTest, EveryCategoryOfTritonsIsKnownByItsName) {
  const char* names[] = {"health",           "metadata",   "inference", "shared-memory",
                         "model-config",     "model-repository", "statistics", "trace",
                         "logging"};
  for (size_t i = 0; i < kApiCategoryCount; ++i) {
    EXPECT_EQ(ApiCategoryName(static_cast<ApiCategory>(i)), names[i]);
    RestrictedApis apis;
    EXPECT_TRUE(apis.Add("--f", std::string(names[i]) + ":k=v", "").ok()) << names[i];
    EXPECT_NE(apis.Find(static_cast<ApiCategory>(i)), nullptr) << names[i];
  }
}

TEST(RestrictedApisTest, RefusesWhatCannotWorkNamingIt) {
  struct Case {
    const char* value;
    const char* why;
  };
  const Case cases[] = {
      {"health", "no ':' after the categories"},
      {"health=k:v", "no '=' between the key and the value"},
      {"health:k", "no '=' between the key and the value"},
      {"health:=v", "the header key is empty"},
      {"health:k=", "the header value is empty"},
      {":k=v", "a category is empty"},
      {"health,,trace:k=v", "a category is empty"},
      {"Health:k=v", "unknown category 'Health'"},
      {"health,health:k=v", "category 'health' is restricted twice"},
  };
  for (const Case& c : cases) {
    RestrictedApis apis;
    Status added = apis.Add("--http-restricted-api", c.value, "");
    ASSERT_FALSE(added.ok()) << c.value;
    EXPECT_EQ(added.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(added.message()), HasSubstr(c.why)) << c.value;
    EXPECT_THAT(std::string(added.message()),
                HasSubstr(std::string("--http-restricted-api=") + c.value));
    EXPECT_TRUE(apis.empty()) << c.value;  // nothing of a refused value is kept
  }
  // A category restricted by an earlier flag cannot be restricted again.
  RestrictedApis apis;
  ASSERT_TRUE(apis.Add("--f", "trace:a=1", "").ok());
  Status again = apis.Add("--f", "logging,trace:b=2", "");
  EXPECT_THAT(std::string(again.message()), HasSubstr("category 'trace' is restricted twice"));
  EXPECT_EQ(apis.Find(ApiCategory::kLogging), nullptr);
}

TEST(HttpApiCategoryTest, EachEndpointHasTritonsCategory) {
  using http::HttpApiCategory;
  struct Case {
    const char* target;
    ApiCategory category;
  };
  const Case cases[] = {
      {"/v2", ApiCategory::kMetadata},
      {"/v2/health/live", ApiCategory::kHealth},
      {"/v2/health/ready", ApiCategory::kHealth},
      {"/v2/models/m", ApiCategory::kMetadata},
      {"/v2/models/m/versions/2", ApiCategory::kMetadata},
      {"/v2/models/m/ready", ApiCategory::kHealth},
      {"/v2/models/m/versions/2/ready", ApiCategory::kHealth},
      {"/v2/models/m/config", ApiCategory::kModelConfig},
      {"/v2/models/m/stats", ApiCategory::kStatistics},
      {"/v2/models/stats", ApiCategory::kStatistics},
      {"/v2/models/m/infer", ApiCategory::kInference},
      {"/v2/models/m/versions/1/infer?x=1", ApiCategory::kInference},
      {"/v2/models/m/generate", ApiCategory::kInference},
      {"/v2/models/m/generate_stream", ApiCategory::kInference},
      {"/v2/models/m/trace/setting", ApiCategory::kTrace},
      {"/v2/trace/setting", ApiCategory::kTrace},
      {"/v2/logging", ApiCategory::kLogging},
      {"/v2/repository/index", ApiCategory::kModelRepository},
      {"/v2/repository/models/m/load", ApiCategory::kModelRepository},
      {"/v2/repository/models/m/sleep", ApiCategory::kModelRepository},
      {"/v2/repository/models/m/lifecycle", ApiCategory::kModelRepository},
      {"/v2/drain", ApiCategory::kModelRepository},
      {"/v2/alertmanager", ApiCategory::kModelRepository},
      {"/v2/systemsharedmemory/region/r/register", ApiCategory::kSharedMemory},
      {"/v2/cudasharedmemory/status", ApiCategory::kSharedMemory},
      {"/v2/memory", ApiCategory::kStatistics},
  };
  for (const Case& c : cases) {
    auto category = HttpApiCategory(c.target);
    ASSERT_TRUE(category.has_value()) << c.target;
    EXPECT_EQ(ApiCategoryName(*category), ApiCategoryName(c.category)) << c.target;
  }
  for (const char* none : {"/", "/metrics", "/v1/models", "/v2/nothing", "/v2/models/m/x",
                           "/v2/models/m/infer/more"}) {
    EXPECT_FALSE(HttpApiCategory(none).has_value()) << none;
  }
}

}  // namespace
}  // namespace vramd::server
