// Stop strings over streamed text: finds a stop string even when it spans tokens, and holds
// back the tail of the text that could still turn into one, so a stop string is never emitted.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda {

class StopMatcher {
 public:
  StopMatcher(std::vector<std::string> stops, bool include_stop_in_output);

  struct Step {
    std::string emit;      // text safe to send now
    bool stopped = false;  // a stop string matched; `emit` ends before it (or after, if included)
    std::string matched;
  };
  // Adds newly decoded text.
  Step push(std::string_view text);
  // End of generation without a stop match: everything held back.
  std::string flush();

 private:
  std::vector<std::string> stops_;
  bool include_;
  size_t max_len_ = 0;
  std::string pending_;  // text received but not yet emitted
};

}  // namespace pagoda
