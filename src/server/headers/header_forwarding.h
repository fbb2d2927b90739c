// HeaderForwarding: Triton's --http-header-forward-pattern and --grpc-header-forward-pattern.
// A request's headers (HTTP) or its call's metadata (gRPC) whose name matches the pattern reach
// the model as string request parameters named as the header (a python model reads them in
// request.parameters()), after the parameters the request itself carries. The pattern is an
// RE2 expression matched anywhere in the name and without case, as Triton's; RE2 (gRPC's own
// dependency) matches in time linear in the name, so no header a client makes can stall a
// server thread on it.
//
// Thread safety: built before the servers start, then read-only.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/infer_request.h"
#include "core/status.h"

namespace re2 {
class RE2;
}

namespace vramd::server {

class HeaderForwarding {
 public:
  // InvalidArgument naming `flag` and the expression's error when `pattern` does not compile,
  // or is empty.
  static Result<HeaderForwarding> Compile(std::string_view flag, const std::string& pattern);

  bool Matches(std::string_view name) const;

  // The parameter a header makes when its name matches: a string parameter named as the
  // header. Parameters are text (a model reads them as JSON): a byte that is not UTF-8 (an
  // HTTP header's obs-text, a gRPC -bin value) becomes U+FFFD, as a decoder reads it.
  std::optional<InferParameter> Parameter(std::string_view name, std::string_view value) const;

  // Appends the Parameter of each of `headers` (name, value) whose name matches, in order.
  void Forward(const std::vector<std::pair<std::string, std::string>>& headers,
               std::vector<InferParameter>* parameters) const;

 private:
  explicit HeaderForwarding(std::shared_ptr<const re2::RE2> pattern)
      : pattern_(std::move(pattern)) {}
  std::shared_ptr<const re2::RE2> pattern_;  // RE2 is not copyable; its matching is const
};

// `text` with each byte that does not begin a well-formed UTF-8 sequence replaced by U+FFFD.
std::string ValidUtf8(std::string_view text);

}  // namespace vramd::server
