#include "gateway/chunk_scanner.h"

#include <algorithm>

namespace pagoda::gateway {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool ChunkScanner::feed(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    if (state_ == kDone || state_ == kFailed) {
      state_ = kFailed;  // nothing may follow the body on this connection's response
      return false;
    }
    if (state_ == kData) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(remaining_, bytes.size() - i));
      remaining_ -= take;
      i += take;
      pos_ += take;
      if (remaining_ == 0) state_ = kDataCr;
      continue;
    }
    const char c = bytes[i++];
    ++pos_;
    switch (state_) {
      case kSize:
        if (const int v = hex_value(c); v >= 0) {
          if (++digits_ > kMaxSizeDigits) state_ = kFailed;
          size_ = size_ * 16 + static_cast<uint64_t>(v);
        } else if (digits_ > 0 && (c == ';' || c == ' ' || c == '\t')) {
          state_ = kExtension;
          line_ = 0;
        } else if (digits_ > 0 && c == '\r') {
          state_ = kSizeLf;
        } else {
          state_ = kFailed;
        }
        break;
      case kExtension:
        if (c == '\r') state_ = kSizeLf;
        else if (++line_ > kMaxLine || c == '\n') state_ = kFailed;
        break;
      case kSizeLf:
        if (c != '\n') {
          state_ = kFailed;
        } else if (size_ == 0) {
          state_ = kTrailerStart;
        } else {
          remaining_ = size_;
          state_ = kData;
        }
        break;
      case kDataCr:
        state_ = c == '\r' ? kDataLf : kFailed;
        break;
      case kDataLf:
        if (c != '\n') {
          state_ = kFailed;
        } else {
          boundary_ = pos_;
          state_ = kSize;
          size_ = 0;
          digits_ = 0;
        }
        break;
      case kTrailerStart:
        if (c == '\r') {
          state_ = kEndLf;
        } else {
          state_ = kTrailerLine;
          line_ = 1;
        }
        break;
      case kTrailerLine:
        if (c == '\r') state_ = kTrailerLf;
        else if (++line_ > kMaxLine || c == '\n') state_ = kFailed;
        break;
      case kTrailerLf:
        state_ = c == '\n' ? kTrailerStart : kFailed;
        break;
      case kEndLf:
        if (c == '\n') {
          boundary_ = pos_;
          state_ = kDone;
        } else {
          state_ = kFailed;
        }
        break;
      default:
        state_ = kFailed;
    }
    if (state_ == kFailed) return false;
  }
  return state_ != kFailed;
}

}  // namespace pagoda::gateway
