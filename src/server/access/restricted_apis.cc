#include "server/access/restricted_apis.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <vector>

namespace vramd::server {
namespace {

constexpr std::array<std::string_view, kApiCategoryCount> kNames = {
    "health",           "metadata",   "inference", "shared-memory", "model-config",
    "model-repository", "statistics", "trace",     "logging"};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

std::string_view ApiCategoryName(ApiCategory category) {
  return kNames[static_cast<size_t>(category)];
}

Status RestrictedApis::Add(std::string_view flag, std::string_view value,
                           std::string_view header_prefix) {
  auto invalid = [&](std::string_view why) {
    return Status::InvalidArgument(fmt::format(
        "{}={}: {}; expected <category>[,<category>...]:<key>=<value> with categories among {}",
        flag, value, why, fmt::join(kNames, ", ")));
  };
  const size_t colon = value.find(':');
  if (colon == std::string_view::npos) return invalid("no ':' after the categories");
  const size_t equals = value.find('=', colon + 1);
  if (equals == std::string_view::npos) return invalid("no '=' between the key and the value");
  const std::string_view key = Trim(value.substr(colon + 1, equals - colon - 1));
  const std::string_view expected = Trim(value.substr(equals + 1));
  if (key.empty()) return invalid("the header key is empty");
  if (expected.empty()) return invalid("the header value is empty");

  std::vector<ApiCategory> categories;
  std::string_view list = value.substr(0, colon);
  while (true) {
    const size_t comma = list.find(',');
    const std::string_view name = Trim(list.substr(0, comma));
    if (name.empty()) return invalid("a category is empty");
    auto it = std::find(kNames.begin(), kNames.end(), name);
    if (it == kNames.end()) return invalid(fmt::format("unknown category '{}'", name));
    const auto category = static_cast<ApiCategory>(it - kNames.begin());
    if (restrictions_[static_cast<size_t>(category)].has_value() ||
        std::find(categories.begin(), categories.end(), category) != categories.end()) {
      return invalid(fmt::format("category '{}' is restricted twice", name));
    }
    categories.push_back(category);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }

  std::string header = fmt::format("{}{}", header_prefix, key);
  // gRPC carries metadata keys in lowercase; HTTP compares header names without case.
  std::transform(header.begin(), header.end(), header.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (ApiCategory c : categories) {
    restrictions_[static_cast<size_t>(c)] = Restriction{header, std::string(expected)};
  }
  return Status::Ok();
}

const RestrictedApis::Restriction* RestrictedApis::Find(ApiCategory category) const {
  const auto& r = restrictions_[static_cast<size_t>(category)];
  return r.has_value() ? &*r : nullptr;
}

bool RestrictedApis::empty() const {
  return std::none_of(restrictions_.begin(), restrictions_.end(),
                      [](const auto& r) { return r.has_value(); });
}

bool RestrictedApis::ReadsHeader(std::string_view name) const {
  return std::any_of(restrictions_.begin(), restrictions_.end(), [name](const auto& r) {
    return r.has_value() && r->header.size() == name.size() &&
           std::equal(name.begin(), name.end(), r->header.begin(), [](char a, char b) {
             return std::tolower(static_cast<unsigned char>(a)) == b;  // header is lowercase
           });
  });
}

std::string RestrictedApis::Summary() const {
  std::vector<std::string> parts;
  for (size_t i = 0; i < kApiCategoryCount; ++i) {
    if (!restrictions_[i].has_value()) continue;
    parts.push_back(fmt::format("{} (header '{}')", kNames[i], restrictions_[i]->header));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string RestrictedApis::RefusalMessage(const Restriction& restriction, bool grpc) {
  return fmt::format("This {} is restricted, expecting header '{}'", grpc ? "protocol" : "API",
                     restriction.header);
}

}  // namespace vramd::server
