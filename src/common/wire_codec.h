// Little-endian byte messages between the processes of one host (the tensor-parallel ranks'
// step plans and executor calls): a Writer appends numbers, flags, counted lists and strings; a
// Reader takes them back, never reading past its input or trusting a count the remaining bytes
// cannot hold, and keeps the first failure (later reads return zeros) naming its field.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace pagoda::wire {

static_assert(std::endian::native == std::endian::little, "messages are written in the host's byte order");

class Writer {
 public:
  template <class T>
  void num(T v) {
    static_assert(std::is_arithmetic_v<T>);
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  void flag(bool b) { num<uint8_t>(b ? 1 : 0); }
  void count(size_t n) { num(static_cast<uint32_t>(n)); }
  void str(const std::string& s) {
    count(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void ints(const std::vector<int32_t>& v) {
    count(v.size());
    for (int32_t x : v) num(x);
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

// Reads from the input; the first failure sticks (later reads return zeros) and names its field.
class Reader {
 public:
  // `what` names the message in errors ("runs past the end of the <what>").
  Reader(std::span<const uint8_t> in, std::string what) : in_(in), what_(std::move(what)) {}

  template <class T>
  T num(const char* field) {
    T v{};
    if (!take(sizeof(T), field)) return v;
    std::memcpy(&v, in_.data() + pos_ - sizeof(T), sizeof(T));
    return v;
  }
  bool flag(const char* field) {
    const uint8_t b = num<uint8_t>(field);
    if (b > 1) fail(field, "is a bool byte other than 0 or 1");
    return b == 1;
  }
  // A count of elements of at least `min_bytes` each: refused when the rest cannot hold them.
  uint32_t count(const char* field, size_t min_bytes) {
    const uint32_t n = num<uint32_t>(field);
    if (ok() && static_cast<uint64_t>(n) * min_bytes > in_.size() - pos_) {
      fail(field, "counts more elements than the bytes left hold");
      return 0;
    }
    return n;
  }
  std::string str(const char* field) {
    const uint32_t n = count(field, 1);
    if (!take(n, field)) return {};
    return std::string(reinterpret_cast<const char*>(in_.data() + pos_ - n), n);
  }
  std::vector<int32_t> ints(const char* field) {
    const uint32_t n = count(field, 4);
    std::vector<int32_t> v(n);
    for (auto& x : v) x = num<int32_t>(field);
    return v;
  }
  void fail(const char* field, const char* why) {
    if (error_.empty()) error_ = std::string(field) + " " + why;
  }
  bool ok() const { return error_.empty(); }
  bool at_end() const { return pos_ == in_.size(); }
  const std::string& error() const { return error_; }
  size_t pos() const { return pos_; }

 private:
  bool take(size_t n, const char* field) {
    if (!ok()) return false;
    if (n > in_.size() - pos_) {
      fail(field, ("runs past the end of the " + what_).c_str());
      return false;
    }
    pos_ += n;
    return true;
  }
  std::span<const uint8_t> in_;
  std::string what_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace pagoda::wire
