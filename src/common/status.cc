#include "common/status.h"

namespace pagoda {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kOutOfRange: return "out of range";
    case StatusCode::kDataLoss: return "corrupt or truncated data";
    case StatusCode::kUnimplemented: return "unsupported";
    case StatusCode::kResourceExhausted: return "resource exhausted";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kInternal: return "internal error";
    case StatusCode::kIoError: return "i/o error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return fmt::format("{}: {}", status_code_name(code_), message_);
}

}  // namespace pagoda
