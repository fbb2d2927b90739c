#include "server/headers/header_forwarding.h"

#include <fmt/format.h>
#include <re2/re2.h>

namespace vramd::server {

Result<HeaderForwarding> HeaderForwarding::Compile(std::string_view flag,
                                                   const std::string& pattern) {
  if (pattern.empty()) {
    return Status::InvalidArgument(fmt::format("{}: the pattern is empty", flag));
  }
  re2::RE2::Options options;
  options.set_case_sensitive(false);
  options.set_log_errors(false);
  auto compiled = std::make_shared<const re2::RE2>(pattern, options);
  if (!compiled->ok()) {
    return Status::InvalidArgument(fmt::format("{}='{}' is not a regular expression: {}", flag,
                                               pattern, compiled->error()));
  }
  return HeaderForwarding(std::move(compiled));
}

bool HeaderForwarding::Matches(std::string_view name) const {
  return re2::RE2::PartialMatch(re2::StringPiece(name.data(), name.size()), *pattern_);
}

void HeaderForwarding::Forward(const std::vector<std::pair<std::string, std::string>>& headers,
                               std::vector<InferParameter>* parameters) const {
  for (const auto& [name, value] : headers) {
    if (Matches(name)) parameters->push_back(InferParameter{name, value});
  }
}

}  // namespace vramd::server
