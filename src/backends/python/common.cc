#include "common.h"

#include <algorithm>
#include <cstring>

#include "ledger_table.h"

namespace vramd::python {

VramdCode CodeFromTriton(int triton_code) {
  switch (triton_code) {
    case kTritonUnknown: return VRAMD_UNKNOWN;
    case kTritonInternal: return VRAMD_INTERNAL;
    case kTritonNotFound: return VRAMD_NOT_FOUND;
    case kTritonInvalidArg: return VRAMD_INVALID_ARGUMENT;
    case kTritonUnavailable: return VRAMD_UNAVAILABLE;
    case kTritonUnsupported: return VRAMD_UNSUPPORTED;
    case kTritonAlreadyExists: return VRAMD_ALREADY_EXISTS;
    case kTritonCancelled: return VRAMD_CANCELLED;
    default: return VRAMD_INTERNAL;
  }
}

int TritonFromCode(VramdCode code) {
  switch (code) {
    case VRAMD_UNKNOWN: return kTritonUnknown;
    case VRAMD_NOT_FOUND: return kTritonNotFound;
    case VRAMD_INVALID_ARGUMENT: return kTritonInvalidArg;
    case VRAMD_UNAVAILABLE: return kTritonUnavailable;
    case VRAMD_UNSUPPORTED: return kTritonUnsupported;
    case VRAMD_ALREADY_EXISTS: return kTritonAlreadyExists;
    case VRAMD_CANCELLED: return kTritonCancelled;
    default: return kTritonInternal;  // INTERNAL, RESOURCE_EXHAUSTED (Triton has no such code)
  }
}

void SetError(VramdError* error, const std::string& message) {
  if (error == nullptr) return;
  constexpr size_t kMax = VRAMD_ERROR_MESSAGE_SIZE - 1;
  if (message.size() <= kMax) {
    std::memcpy(error->message, message.data(), message.size());
    error->message[message.size()] = '\0';
    return;
  }
  // Keep the tail: a traceback ends with the line naming the error.
  static constexpr char kMark[] = "...";
  const size_t keep = kMax - (sizeof(kMark) - 1);
  std::memcpy(error->message, kMark, sizeof(kMark) - 1);
  std::memcpy(error->message + sizeof(kMark) - 1, message.data() + message.size() - keep, keep);
  error->message[kMax] = '\0';
}

void Log(const VramdServerApi* server, VramdLogLevel level, const std::string& text) {
  if (server != nullptr && server->log != nullptr) server->log(server->server, level, text.c_str());
}

std::string TypeName(py::handle object) {
  return py::str(py::type::handle_of(object)).cast<std::string>();
}

std::string ErrorText(const py::error_already_set& error) {
  std::string text;
  try {
    py::object lines = py::module_::import("traceback")
                           .attr("format_exception_only")(error.type(), error.value());
    for (py::handle line : lines) text += py::str(line).cast<std::string>();
    while (!text.empty() && text.back() == '\n') text.pop_back();
  } catch (...) {
    text = error.what();
  }
  // An allocation the server refused during the call is the likely cause (numpy and torch
  // raise out-of-memory errors that name none). First, since errors are cut to a fixed size on
  // their way out (torch's own text runs to several hundred characters).
  if (std::string refused = TakeLedgerFailure(); !refused.empty()) {
    text = "the server refused an allocation (" + refused + "); the model raised " + text;
  }
  return text;
}

std::string TracebackText(const py::error_already_set& error) {
  try {
    py::object lines = py::module_::import("traceback")
                           .attr("format_exception")(error.type(), error.value(), error.trace());
    std::string text;
    for (py::handle line : lines) text += py::str(line).cast<std::string>();
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  } catch (...) {
    return error.what();
  }
}

}  // namespace vramd::python
