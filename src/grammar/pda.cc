#include "grammar/pda.h"

#include <algorithm>

namespace pagoda::grammar {

// Collects stacks, then writes them sorted and unique.
struct Pda::Builder {
  std::vector<uint32_t> data;
  std::vector<std::pair<uint32_t, uint32_t>> spans;  // (offset, depth) into data
  void add(const std::vector<uint32_t>& below, const uint32_t* top) {
    if (spans.size() >= kMaxStacks) return;
    const uint32_t off = static_cast<uint32_t>(data.size());
    data.insert(data.end(), below.begin(), below.end());
    if (top) data.push_back(*top);
    spans.push_back({off, static_cast<uint32_t>(data.size()) - off});
  }
  void finish(StackSet* out) {
    auto less = [&](const std::pair<uint32_t, uint32_t>& a, const std::pair<uint32_t, uint32_t>& b) {
      if (a.second != b.second) return a.second < b.second;
      return std::lexicographical_compare(data.begin() + a.first, data.begin() + a.first + a.second,
                                          data.begin() + b.first, data.begin() + b.first + b.second);
    };
    auto equal = [&](const std::pair<uint32_t, uint32_t>& a, const std::pair<uint32_t, uint32_t>& b) {
      return a.second == b.second && std::equal(data.begin() + a.first, data.begin() + a.first + a.second, data.begin() + b.first);
    };
    std::sort(spans.begin(), spans.end(), less);
    spans.erase(std::unique(spans.begin(), spans.end(), equal), spans.end());
    out->flat.clear();
    for (auto [off, n] : spans) {
      out->flat.push_back(n);
      out->flat.insert(out->flat.end(), data.begin() + off, data.begin() + off + n);
    }
  }
};

void Pda::expand(std::vector<uint32_t>& below, uint32_t pos, Builder& out) const {
  if (out.spans.size() >= kMaxStacks) return;  // the state is cut (pda.h): walking further adds nothing
  const Element& e = g_.elements[pos];
  switch (e.kind) {
    case Element::kBytes:
      out.add(below, &pos);
      return;
    case Element::kEnd: {
      if (below.empty()) {
        out.add(below, nullptr);  // the root is complete
        return;
      }
      const uint32_t cont = below.back();
      below.pop_back();
      expand(below, cont, out);
      below.push_back(cont);
      return;
    }
    case Element::kRule: {
      const uint32_t next = pos + 1;
      const bool tail = g_.elements[next].kind == Element::kEnd;
      if (!tail) {
        if (below.size() >= kMaxStackDepth) return;
        below.push_back(next);
      }
      for (uint32_t start : g_.rules[e.arg]) expand(below, start, out);
      if (!tail) below.pop_back();
      return;
    }
  }
}

StackSet Pda::initial() const {
  Builder b;
  std::vector<uint32_t> below;
  for (uint32_t start : g_.rules[g_.root]) expand(below, start, b);
  StackSet s;
  b.finish(&s);
  return s;
}

bool Pda::advance(const StackSet& in, uint8_t byte, StackSet* out) const {
  thread_local Builder b;
  thread_local std::vector<uint32_t> below;
  b.data.clear();
  b.spans.clear();
  const auto& f = in.flat;
  for (size_t i = 0; i < f.size();) {
    const uint32_t n = f[i];
    if (n > 0) {
      const uint32_t top = f[i + n];
      if (g_.byte_sets[g_.elements[top].arg].test(byte)) {
        below.assign(f.begin() + i + 1, f.begin() + i + n);
        expand(below, top + 1, b);
      }
    }
    i += n + 1;
  }
  b.finish(out);
  return !out->empty();
}

bool Pda::advance_bytes(StackSet* state, std::string_view bytes) const {
  StackSet next;
  for (unsigned char c : bytes) {
    if (!advance(*state, c, &next)) {
      state->flat.clear();
      return false;
    }
    std::swap(*state, next);
  }
  return true;
}

bool Pda::accepting(const StackSet& s) const {
  // Stacks are sorted by depth first: the empty one, if any, comes first.
  return !s.flat.empty() && s.flat[0] == 0;
}

ByteSet Pda::next_bytes(const StackSet& s) const {
  ByteSet u;
  const auto& f = s.flat;
  for (size_t i = 0; i < f.size();) {
    const uint32_t n = f[i];
    if (n > 0) u |= g_.byte_sets[g_.elements[f[i + n]].arg];
    i += n + 1;
  }
  return u;
}

}  // namespace pagoda::grammar
