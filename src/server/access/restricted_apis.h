// RestrictedApis: Triton's --http-restricted-api and --grpc-restricted-protocol. Each names
// groups of endpoints (Triton's categories) and a header that a request to them must carry
// with an exact value; a request without it is refused before anything else is read of it.
// This fences, say, the repository's load and unload behind a shared secret while inference
// stays open; it is no substitute for TLS and a real authenticating proxy (docs/security.md).
//
// The flag's value is `<category>[,<category>...]:<key>=<value>`; the flag may be given
// several times, a category at most once over all of them. The header a request carries is
// the key itself over HTTP (header names are case-insensitive) and
// `triton-grpc-protocol-<key>` over gRPC (metadata keys are lowercase), as Triton names them.
//
// Thread safety: built before the servers start, then read-only.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace vramd::server {

// Triton's categories, in its order.
enum class ApiCategory {
  kHealth,
  kMetadata,
  kInference,
  kSharedMemory,
  kModelConfig,
  kModelRepository,
  kStatistics,
  kTrace,
  kLogging,
};
inline constexpr size_t kApiCategoryCount = 9;

// The category's name as the flags spell it ("model-repository").
std::string_view ApiCategoryName(ApiCategory category);

// The metadata key prefix of a gRPC restriction: `triton-grpc-protocol-` + key.
inline constexpr std::string_view kGrpcRestrictionPrefix = "triton-grpc-protocol-";

class RestrictedApis {
 public:
  struct Restriction {
    std::string header;  // as the request must carry it (lowercase for gRPC)
    std::string value;
  };

  // Adds one flag value. `flag` names the flag in errors; `header_prefix` is put before the key
  // (kGrpcRestrictionPrefix for gRPC, empty for HTTP). InvalidArgument naming what is wrong: a
  // missing ':' or '=', an empty category, key or value, an unknown category (the valid ones
  // listed), or a category restricted twice.
  Status Add(std::string_view flag, std::string_view value, std::string_view header_prefix);

  // The restriction on `category`, or nullptr when it is open.
  const Restriction* Find(ApiCategory category) const;
  bool empty() const;
  // Whether `name` is a header the restrictions read (compared without case, as HTTP header
  // names are).
  bool ReadsHeader(std::string_view name) const;
  // For the start-up log: each restricted category and its header, never the value
  // ("inference (header 'infer-key'), model-repository (header 'admin-key')").
  std::string Summary() const;

  // The refusal's message: Triton's words, naming the header.
  static std::string RefusalMessage(const Restriction& restriction, bool grpc);

 private:
  std::array<std::optional<Restriction>, kApiCategoryCount> restrictions_;
};

}  // namespace vramd::server
