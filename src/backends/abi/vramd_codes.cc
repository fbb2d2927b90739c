#include "backends/abi/vramd_codes.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace vramd::backends::abi {

VramdCode ToVramdCode(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return VRAMD_OK;
    case StatusCode::kInvalidArgument: return VRAMD_INVALID_ARGUMENT;
    case StatusCode::kNotFound: return VRAMD_NOT_FOUND;
    case StatusCode::kUnavailable: return VRAMD_UNAVAILABLE;
    case StatusCode::kUnsupported: return VRAMD_UNSUPPORTED;
    case StatusCode::kResourceExhausted: return VRAMD_RESOURCE_EXHAUSTED;
    case StatusCode::kAlreadyExists: return VRAMD_ALREADY_EXISTS;
    case StatusCode::kCancelled: return VRAMD_CANCELLED;
    case StatusCode::kUnknown: return VRAMD_UNKNOWN;
    default: return VRAMD_INTERNAL;
  }
}

Status FromVramd(VramdCode code, const VramdError& error, std::string_view context) {
  // The backend may have left the buffer without a terminator: never read past it.
  const size_t length = strnlen(error.message, VRAMD_ERROR_MESSAGE_SIZE);
  std::string text(error.message, length);
  if (text.empty()) text = "failed without a message";
  auto message = [&](std::string_view what) {
    return context.empty() ? std::string(what) : fmt::format("{}: {}", context, what);
  };
  switch (code) {
    case VRAMD_OK: return Status::Ok();
    case VRAMD_INVALID_ARGUMENT: return Status::InvalidArgument(message(text));
    case VRAMD_NOT_FOUND: return Status::NotFound(message(text));
    case VRAMD_UNAVAILABLE: return Status::Unavailable(message(text));
    case VRAMD_UNSUPPORTED: return Status::Unsupported(message(text));
    case VRAMD_RESOURCE_EXHAUSTED: return Status::ResourceExhausted(message(text));
    case VRAMD_INTERNAL: return Status::Internal(message(text));
    case VRAMD_ALREADY_EXISTS: return Status::AlreadyExists(message(text));
    case VRAMD_CANCELLED: return Status::Cancelled(message(text));
    case VRAMD_UNKNOWN: return Status::Unknown(message(text));
  }
  return Status::Internal(
      message(fmt::format("returned unknown code {}: {}", static_cast<int>(code), text)));
}

void SetError(VramdError* error, std::string_view message) {
  if (error == nullptr) return;
  const size_t n = std::min(message.size(), size_t{VRAMD_ERROR_MESSAGE_SIZE - 1});
  std::memcpy(error->message, message.data(), n);
  error->message[n] = '\0';
}

StatusCode ToStatusCode(VramdCode code) {
  switch (code) {
    case VRAMD_OK: return StatusCode::kOk;
    case VRAMD_INVALID_ARGUMENT: return StatusCode::kInvalidArgument;
    case VRAMD_NOT_FOUND: return StatusCode::kNotFound;
    case VRAMD_UNAVAILABLE: return StatusCode::kUnavailable;
    case VRAMD_UNSUPPORTED: return StatusCode::kUnsupported;
    case VRAMD_RESOURCE_EXHAUSTED: return StatusCode::kResourceExhausted;
    case VRAMD_ALREADY_EXISTS: return StatusCode::kAlreadyExists;
    case VRAMD_CANCELLED: return StatusCode::kCancelled;
    case VRAMD_UNKNOWN: return StatusCode::kUnknown;
    case VRAMD_INTERNAL: return StatusCode::kInternal;
  }
  return StatusCode::kInternal;
}

}  // namespace vramd::backends::abi
