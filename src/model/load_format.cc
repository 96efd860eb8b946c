#include "model/load_format.h"

namespace pagoda {

Result<LoadFormat> parse_load_format(std::string_view name) {
  if (name == "auto" || name.empty()) return LoadFormat::kAuto;
  if (name == "dummy") return LoadFormat::kDummy;
  return invalid_argument("unknown load format '{}' (auto, dummy)", name);
}

std::string_view load_format_name(LoadFormat f) {
  switch (f) {
    case LoadFormat::kAuto: return "auto";
    case LoadFormat::kDummy: return "dummy";
  }
  return "?";
}

}  // namespace pagoda
