#include "blockmgr/status.h"

namespace bm {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInternal:
      return "internal error";
    case StatusCode::kNotFound:
      return "not found";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kOutOfSpace:
      return "out of space";
    case StatusCode::kUnavailable:
      return "unavailable";
    case StatusCode::kUnknownWorker:
      return "unknown worker";
    case StatusCode::kAborted:
      return "aborted";
    case StatusCode::kTooLarge:
      return "too large";
    case StatusCode::kPermissionDenied:
      return "permission denied";
    case StatusCode::kDataLoss:
      return "data loss";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

}  // namespace bm
