#include "core/request.h"

namespace pagoda {

bool is_finished(RequestStatus s) {
  return s == RequestStatus::kFinishedStopped || s == RequestStatus::kFinishedLength ||
         s == RequestStatus::kFinishedAborted || s == RequestStatus::kFinishedError;
}

const char* finish_reason_name(RequestStatus s) {
  switch (s) {
    case RequestStatus::kFinishedStopped: return "stop";
    case RequestStatus::kFinishedLength: return "length";
    case RequestStatus::kFinishedAborted: return "abort";
    case RequestStatus::kFinishedError: return "error";
    default: return "";
  }
}

std::vector<int32_t> Request::all_tokens() const {
  std::vector<int32_t> t(prompt);
  t.insert(t.end(), output.begin(), output.end());
  return t;
}

}  // namespace pagoda
