#include "config_checks.h"

#include <google/protobuf/text_format.h>
#include <google/protobuf/util/message_differencer.h>

#include <string>

#include "config/model_config_json.h"
#include "config/model_config_parser.h"
#include "fuzz_support.h"

namespace vramd::fuzz {
namespace {

bool Same(const config::ModelConfig& a, const config::ModelConfig& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

std::string Text(const config::ModelConfig& c) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(c, &text);
  return text;
}

}  // namespace

void CheckAcceptedConfig(const config::ModelConfig& c) {
  const std::string json = config::ModelConfigToJson(c);
  if (!IsJson(json)) Fail("ModelConfigToJson wrote invalid JSON: " + json.substr(0, 500));
  auto from_json = config::ModelConfigFromJson(json);
  if (!from_json.ok()) {
    Fail("ModelConfigToJson's output does not read back: " + from_json.status().ToString() +
         "\n" + json.substr(0, 500));
  }
  if (!Same(*from_json, c)) Fail("the JSON round trip changed the config:\n" + Text(c));

  const std::string text = Text(c);
  auto from_text = config::ParseModelConfigText(text, "printed.pbtxt");
  if (!from_text.ok()) {
    Fail("protobuf's text form does not read back: " + from_text.status().ToString() + "\n" +
         text.substr(0, 500));
  }
  if (!Same(from_text->config, c)) Fail("the text round trip changed the config:\n" + text);

  // The name check is trivial; naming the folder as the config does lets validation go on.
  const std::string dir = c.name().empty() ? "fuzz_model" : c.name();
  config::ModelConfig once = c;
  if (!config::ValidateAndNormalize(&once, dir).ok()) {
    if (!Same(once, c)) Fail("a failed validation changed the config");
    return;
  }
  config::ModelConfig twice = once;
  Status again = config::ValidateAndNormalize(&twice, dir);
  if (!again.ok()) Fail("a normalized config fails validation: " + again.ToString());
  if (!Same(twice, once)) Fail("normalizing twice differs from once:\n" + Text(once));
}

}  // namespace vramd::fuzz
