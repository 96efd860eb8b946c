#include "loader/packed_int_checkpoint.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/half.h"
#include "common/log.h"
#include "loader/hf_model_dir.h"
#include "quant/grouped_int.h"
#include "quant/rtn.h"

namespace pagoda {
namespace {

using nlohmann::json;
using quant::GroupedIntWeight;

// kFp8: float8_e4m3 weights with scales (compressed-tensors float-quantized, quant_method "fp8").
enum class Method { kGptq, kAwq, kCompressedTensors, kFp8 };

// What quantization_config says, once checked.
struct PackedConfig {
  Method method = Method::kGptq;
  std::string name;        // "gptq", ...
  std::string source;      // "config.json's quantization_config" or the quantize_config.json path
  int bits = 0;            // gptq / awq; compressed-tensors: the bits each tensor's shapes imply
  int64_t group_size = 0;  // -1: per-channel
  bool gptq_v1 = true;     // the stored zero is zero - 1
  std::vector<int> ct_bits;       // compressed-tensors: the num_bits its config groups allow
  bool ct_symmetric = true;
  std::string fp8_scale = "weight_scale";  // kFp8: the scale tensor's suffix (quant_method fp8: weight_scale_inv)
  int64_t fp8_block[2] = {0, 0};           // kFp8: [rows, cols] a scale covers; 0: a scale per tensor or row
};

// The tensors of one quantized module, by their suffix.
struct Module {
  std::string prefix;  // "model.layers.0.self_attn.q_proj"
  std::map<std::string, const HfModelDir::Entry*> parts;  // "qweight" -> entry
};

// A tensor's raw bytes and shape, checked against an expected dtype.
struct Raw {
  std::string name;
  const SafetensorsTensorInfo* info = nullptr;
  const uint8_t* data = nullptr;
  int64_t dim(int i) const { return info->shape.at(static_cast<size_t>(i)); }
  uint32_t u32(int64_t i) const {
    uint32_t v;
    std::memcpy(&v, data + 4 * i, 4);
    return v;
  }
};

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

Result<int> json_int(const json& j, std::initializer_list<const char*> keys, const std::string& where, bool required,
                     int fallback) {
  for (const char* k : keys) {
    auto it = j.find(k);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_number_integer()) return invalid_argument("{}: '{}' must be an integer, got {}", where, k, it->dump());
    return it->get<int>();
  }
  if (required) return invalid_argument("{}: missing '{}'", where, *keys.begin());
  return fallback;
}

Result<PackedConfig> parse_gptq_awq(const json& q, Method method, const std::string& where) {
  PackedConfig c;
  c.method = method;
  c.name = method == Method::kGptq ? "gptq" : "awq";
  c.source = where;
  PAGODA_ASSIGN_OR_RETURN(c.bits, json_int(q, {"bits", "w_bit"}, where, true, 0));
  PAGODA_ASSIGN_OR_RETURN(int g, json_int(q, {"group_size", "q_group_size"}, where, true, 0));
  c.group_size = g;
  if (c.group_size == 0 || c.group_size < -1) return invalid_argument("{}: group_size {} (expected > 0, or -1 for per-channel)", where, g);
  if (method == Method::kGptq) {
    if (c.bits != 4 && c.bits != 8)
      return unimplemented("{}: GPTQ with {} bits is not supported (4 and 8 are)", where, c.bits);
    std::string fmt_name = q.value("checkpoint_format", q.value("format", std::string("gptq")));
    if (fmt_name == "gptq") c.gptq_v1 = true;
    else if (fmt_name == "gptq_v2") c.gptq_v1 = false;
    else
      return unimplemented("{}: GPTQ checkpoint_format '{}' is not supported (gptq and gptq_v2 are; marlin, bitblas "
                           "and other kernel layouts are repacked copies: load the plain gptq checkpoint)", where, fmt_name);
    if (auto it = q.find("dynamic"); it != q.end() && !it->is_null() && !it->empty())
      return unimplemented("{}: per-module overrides ('dynamic') are not supported", where);
  } else {
    if (c.bits != 4) return unimplemented("{}: AWQ with {} bits is not supported (4 is)", where, c.bits);
    const std::string version = q.value("version", std::string("gemm"));
    std::string v = version;
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char ch) { return std::tolower(ch); });
    if (v != "gemm")
      return unimplemented("{}: AWQ version '{}' is not supported (gemm is: its qweight is [K, N/8])", where, version);
    if (q.contains("zero_point") && !q.value("zero_point", true))
      return unimplemented("{}: AWQ without zero points (zero_point false) is not supported", where);
  }
  return c;
}

// [rows, cols] of a block-scaled FP8 weight's blocks from `key` (two positive integers).
Status read_block(const json& j, const char* key, const std::string& where, int64_t out[2]) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array() || it->size() != 2 || !(*it)[0].is_number_integer() ||
      !(*it)[1].is_number_integer() || (*it)[0].get<int64_t>() <= 0 || (*it)[1].get<int64_t>() <= 0)
    return invalid_argument("{}: '{}' must be two positive integers, got {}", where, key,
                            it == j.end() ? std::string("nothing") : it->dump());
  out[0] = (*it)[0].get<int64_t>();
  out[1] = (*it)[1].get<int64_t>();
  return {};
}

// compressed-tensors float-quantized: FP8 E4M3 weights; the activation scheme (static or dynamic
// FP8) is not applied: activations stay in the compute dtype.
Result<PackedConfig> parse_ct_float(const json& q, const std::string& where) {
  PackedConfig c;
  c.method = Method::kFp8;
  c.name = "compressed-tensors float-quantized (FP8)";
  c.source = where;
  auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object() || groups->empty())
    return invalid_argument("{}: compressed-tensors needs config_groups", where);
  for (const auto& [gname, g] : groups->items()) {
    const std::string gw = fmt::format("{} config_groups.{}", where, gname);
    auto w = g.find("weights");
    if (w == g.end() || !w->is_object()) return invalid_argument("{}: missing 'weights'", gw);
    if (w->value("type", std::string()) != "float" || w->value("num_bits", 0) != 8)
      return unimplemented("{}: float-quantized weights must be 8-bit floats (type float, num_bits 8)", gw);
    const std::string strategy = w->value("strategy", std::string("tensor"));
    if (strategy != "tensor" && strategy != "channel" && strategy != "block")
      return unimplemented("{}: FP8 weight strategy '{}' is not supported (tensor, channel and block are)", gw, strategy);
    if (strategy == "block") PAGODA_RETURN_IF_ERROR(read_block(*w, "block_structure", gw, c.fp8_block));
  }
  return c;
}

// quant_method "fp8" (transformers' FineGrainedFP8: weight F8_E4M3 and weight_scale_inv per block).
Result<PackedConfig> parse_fp8(const json& q, const std::string& where) {
  PackedConfig c;
  c.method = Method::kFp8;
  c.name = "fp8";
  c.source = where;
  c.fp8_scale = "weight_scale_inv";
  const std::string fmt_name = q.value("fmt", std::string("e4m3"));
  if (fmt_name != "e4m3") return unimplemented("{}: FP8 format '{}' is not supported (e4m3 is)", where, fmt_name);
  if (q.contains("weight_block_size") && !q["weight_block_size"].is_null())
    PAGODA_RETURN_IF_ERROR(read_block(q, "weight_block_size", where, c.fp8_block));
  return c;
}

Result<PackedConfig> parse_compressed_tensors(const json& q, const std::string& where) {
  PackedConfig c;
  c.method = Method::kCompressedTensors;
  c.name = "compressed-tensors";
  c.source = where;
  const std::string format = q.value("format", std::string());
  if (format == "float-quantized") return parse_ct_float(q, where);
  if (format != "pack-quantized")
    return unimplemented("{}: compressed-tensors format '{}' is not supported (pack-quantized: int4 / int8 "
                         "weights packed in int32, and float-quantized: FP8 E4M3 weights, are)", where, format);
  auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object() || groups->empty())
    return invalid_argument("{}: compressed-tensors needs config_groups", where);
  bool first = true;
  for (const auto& [gname, g] : groups->items()) {
    const std::string gw = fmt::format("{} config_groups.{}", where, gname);
    if (g.contains("format") && g["format"].is_string() && g["format"] != "pack-quantized")
      return unimplemented("{}: format '{}' is not supported (pack-quantized is)", gw, g["format"].get<std::string>());
    if (auto ia = g.find("input_activations"); ia != g.end() && !ia->is_null())
      return unimplemented("{}: activation quantization (input_activations) is not supported; weight-only schemes "
                           "(W4A16, W8A16) are", gw);
    auto w = g.find("weights");
    if (w == g.end() || !w->is_object()) return invalid_argument("{}: missing 'weights'", gw);
    const std::string type = w->value("type", std::string("int"));
    if (type != "int") return unimplemented("{}: weights of type '{}' are not supported (int is)", gw, type);
    PAGODA_ASSIGN_OR_RETURN(int bits, json_int(*w, {"num_bits"}, gw + ".weights", true, 0));
    if (bits != 4 && bits != 8) return unimplemented("{}: {}-bit weights are not supported (4 and 8 are)", gw, bits);
    const std::string strategy = w->value("strategy", std::string("tensor"));
    if (strategy != "group" && strategy != "channel")
      return unimplemented("{}: weight strategy '{}' is not supported (group and channel are)", gw, strategy);
    if (w->value("dynamic", false) == true) return unimplemented("{}: dynamic weight quantization is not supported", gw);
    const bool sym = w->value("symmetric", true);
    if (!first && sym != c.ct_symmetric)
      return unimplemented("{}: config groups that differ in symmetry are not supported", gw);
    c.ct_symmetric = sym;
    if (std::find(c.ct_bits.begin(), c.ct_bits.end(), bits) == c.ct_bits.end()) c.ct_bits.push_back(bits);
    first = false;
  }
  return c;
}

Result<std::optional<PackedConfig>> parse_config(const json& q, const std::string& where);

// quantization_config (config.json) or AutoGPTQ's quantize_config.json; nullopt when neither.
Result<std::optional<PackedConfig>> find_config(const HfModelDir& dir) {
  const json& cfg = dir.config();
  json q;
  std::string where;
  if (auto it = cfg.find("quantization_config"); it != cfg.end() && !it->is_null()) {
    q = *it;
    where = dir.config_path() + " quantization_config";
  } else {
    const std::string alt = dir.dir() + "/quantize_config.json";
    std::error_code ec;
    if (!std::filesystem::exists(alt, ec)) return std::optional<PackedConfig>();
    PAGODA_ASSIGN_OR_RETURN(q, read_json_file(alt));
    where = alt;
    if (!q.contains("quant_method")) q["quant_method"] = "gptq";  // AutoGPTQ's file names none
  }
  return parse_config(q, where);
}

Result<std::optional<PackedConfig>> parse_config(const json& q, const std::string& where) {
  if (!q.is_object()) return invalid_argument("{}: not a JSON object", where);
  const std::string method = q.value("quant_method", std::string());
  auto some = [](Result<PackedConfig> c) -> Result<std::optional<PackedConfig>> {
    if (!c.ok()) return c.status();
    return std::optional<PackedConfig>(std::move(c).value());
  };
  if (method == "gptq") return some(parse_gptq_awq(q, Method::kGptq, where));
  if (method == "awq") return some(parse_gptq_awq(q, Method::kAwq, where));
  if (method == "compressed-tensors") {
    // No quantization groups (a sparse-only checkpoint: sparsity_config, format "dense"): the
    // weights are plain dense tensors (model/model_config.h reads the sparsity).
    auto groups = q.find("config_groups");
    const bool no_groups = groups == q.end() || groups->is_null() || (groups->is_object() && groups->empty());
    if (no_groups && q.value("format", std::string("dense")) == "dense") return std::optional<PackedConfig>();
    return some(parse_compressed_tensors(q, where));
  }
  if (method == "fp8") return some(parse_fp8(q, where));
  return unimplemented("{}: quant_method '{}' is not supported (gptq, awq, fp8 and compressed-tensors pack-quantized and "
                       "float-quantized are)",
                       where, method);
}

Result<Raw> raw(const Module& m, const std::string& suffix, const std::string& dtype, size_t ndim) {
  auto it = m.parts.find(suffix);
  if (it == m.parts.end()) return not_found("quantized module '{}' has no tensor '{}.{}'", m.prefix, m.prefix, suffix);
  Raw r;
  r.name = m.prefix + "." + suffix;
  r.info = it->second->info;
  r.data = it->second->file->tensor_bytes(*r.info).data();
  if (r.info->dtype_name != dtype)
    return invalid_argument("tensor '{}' in {} has dtype {}, expected {}", r.name, it->second->file->path(),
                            r.info->dtype_name, dtype);
  if (r.info->shape.size() != ndim)
    return invalid_argument("tensor '{}' in {} has shape {}, expected {} dimensions", r.name, it->second->file->path(),
                            shape_str(r.info->shape), ndim);
  return r;
}

Status expect_shape(const Raw& r, const std::vector<int64_t>& want, const std::string& why) {
  if (r.info->shape != want)
    return invalid_argument("tensor '{}' has shape {}, expected {} ({})", r.name, shape_str(r.info->shape),
                            shape_str(want), why);
  return {};
}

// Scales of any float dtype as fp16 bits: out[n * G + g] = src[g * N + n] (transposed: GPTQ / AWQ
// store [G, N]) or src[n * G + g] (compressed-tensors: [N, G]).
Result<std::vector<uint16_t>> read_scales(const Module& m, const std::string& suffix, int64_t N, int64_t G,
                                          bool transposed) {
  auto it = m.parts.find(suffix);
  if (it == m.parts.end()) return not_found("quantized module '{}' has no tensor '{}.{}' (its scales)", m.prefix, m.prefix, suffix);
  const std::string dt = it->second->info->dtype_name;
  if (dt != "F16" && dt != "BF16" && dt != "F32")
    return invalid_argument("tensor '{}.{}' has dtype {}, expected F16, BF16 or F32", m.prefix, suffix, dt);
  PAGODA_ASSIGN_OR_RETURN(Raw r, raw(m, suffix, dt, 2));
  PAGODA_RETURN_IF_ERROR(expect_shape(r, transposed ? std::vector<int64_t>{G, N} : std::vector<int64_t>{N, G},
                                      fmt::format("{} groups of {} outputs", G, N)));
  std::vector<uint16_t> out(static_cast<size_t>(N * G));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t i = transposed ? g * N + n : n * G + g;
      uint16_t h;
      if (dt == "F16") {
        std::memcpy(&h, r.data + 2 * i, 2);
      } else if (dt == "BF16") {
        uint16_t b;
        std::memcpy(&b, r.data + 2 * i, 2);
        h = f32_to_fp16(f32_from_bits(static_cast<uint32_t>(b) << 16));
      } else {
        float f;
        std::memcpy(&f, r.data + 4 * i, 4);
        h = f32_to_fp16(f);
      }
      if ((h & 0x7c00u) == 0x7c00u)
        return invalid_argument("tensor '{}' holds a scale that is not a finite fp16 value (row {}, group {})", r.name, n, g);
      out[static_cast<size_t>(n * G + g)] = h;
    }
  return out;
}

// The act-order permutation of g_idx: empty when g_idx is absent or k / group (the groups are runs
// of inputs); else `order` with the inputs of group 0 first, then group 1's, ... (each in input
// order), so that the weight's columns taken in that order form contiguous groups. Every group must
// hold exactly `group` inputs (GPTQ's g_idx = rank / group_size).
Result<std::vector<int32_t>> act_order(const Module& m, const std::string& suffix, int64_t K, int64_t group,
                                       const std::string& file) {
  auto it = m.parts.find(suffix);
  if (it == m.parts.end()) return std::vector<int32_t>();
  PAGODA_ASSIGN_OR_RETURN(Raw r, raw(m, suffix, "I32", 1));
  PAGODA_RETURN_IF_ERROR(expect_shape(r, {K}, "one group index per input feature"));
  bool trivial = true;
  for (int64_t k = 0; k < K && trivial; ++k) trivial = static_cast<int64_t>(static_cast<int32_t>(r.u32(k))) == k / group;
  if (trivial) return std::vector<int32_t>();
  const int64_t G = K / group;
  std::vector<std::vector<int32_t>> members(static_cast<size_t>(G));
  for (int64_t k = 0; k < K; ++k) {
    const int32_t g = static_cast<int32_t>(r.u32(k));
    if (g < 0 || g >= G)
      return invalid_argument("tensor '{}' in {}: g_idx[{}] = {} is not a group index (0 to {})", r.name, file, k, g, G - 1);
    members[static_cast<size_t>(g)].push_back(static_cast<int32_t>(k));
  }
  std::vector<int32_t> order;
  order.reserve(static_cast<size_t>(K));
  for (int64_t g = 0; g < G; ++g) {
    if (static_cast<int64_t>(members[static_cast<size_t>(g)].size()) != group)
      return unimplemented("tensor '{}' in {}: act-order group {} holds {} inputs, not group_size {}: only g_idx of the "
                           "GPTQ form (rank / group_size) can be reordered into contiguous groups", r.name, file, g,
                           members[static_cast<size_t>(g)].size(), group);
    order.insert(order.end(), members[static_cast<size_t>(g)].begin(), members[static_cast<size_t>(g)].end());
  }
  return order;
}

// Columns of w (codes only: the groups are already the reordered runs) taken in `order`.
void reorder_columns(GroupedIntWeight& w, const std::vector<int32_t>& order) {
  if (order.empty()) return;
  std::vector<uint8_t> row(static_cast<size_t>(w.k));
  for (int64_t n = 0; n < w.n; ++n) {
    uint8_t* c = w.codes.data() + n * w.k;
    for (int64_t j = 0; j < w.k; ++j) row[static_cast<size_t>(j)] = c[order[static_cast<size_t>(j)]];
    std::memcpy(c, row.data(), row.size());
  }
}

std::string file_of(const Module& m, const std::string& suffix) {
  auto it = m.parts.find(suffix);
  return it == m.parts.end() ? std::string("?") : it->second->file->path();
}

// `order`: the act-order permutation the weight's columns were reordered by (empty: none).
Result<GroupedIntWeight> decode_gptq(const Module& m, const PackedConfig& c, std::vector<int32_t>* order) {
  PAGODA_ASSIGN_OR_RETURN(Raw qw, raw(m, "qweight", "I32", 2));
  PAGODA_ASSIGN_OR_RETURN(Raw qz, raw(m, "qzeros", "I32", 2));
  const int b = c.bits, per = 32 / b;
  const uint32_t mask = (1u << b) - 1;
  const int64_t K = qw.dim(0) * per, N = qw.dim(1);
  const int64_t group = c.group_size == -1 ? K : c.group_size;
  if (K % group != 0) return invalid_argument("'{}': group_size {} does not divide K = {} ({} x {} rows of qweight)", m.prefix, group, K, qw.dim(0), per);
  const int64_t G = K / group;
  if (N % per != 0) return invalid_argument("'{}': N = {} is not a multiple of {} (qzeros packs {} per int32)", m.prefix, N, per, per);
  PAGODA_RETURN_IF_ERROR(expect_shape(qz, {G, N / per}, fmt::format("{}-bit zero points of {} groups packed along N", b, G)));
  PAGODA_ASSIGN_OR_RETURN(*order, act_order(m, "g_idx", K, group, file_of(m, "g_idx")));
  GroupedIntWeight w;
  w.n = N;
  w.k = K;
  w.group = group;
  w.bits = b;
  PAGODA_ASSIGN_OR_RETURN(w.scales, read_scales(m, "scales", N, G, /*transposed=*/true));
  w.codes.resize(static_cast<size_t>(N * K));
  for (int64_t row = 0; row < qw.dim(0); ++row)
    for (int64_t n = 0; n < N; ++n) {
      const uint32_t word = qw.u32(row * N + n);
      for (int j = 0; j < per; ++j) w.codes[static_cast<size_t>(n * K + row * per + j)] = static_cast<uint8_t>((word >> (b * j)) & mask);
    }
  w.zeros.resize(static_cast<size_t>(N * G));
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n) {
      const uint32_t word = qz.u32(g * (N / per) + n / per);
      w.zeros[static_cast<size_t>(n * G + g)] = static_cast<int32_t>((word >> (b * (n % per))) & mask) + (c.gptq_v1 ? 1 : 0);
    }
  reorder_columns(w, *order);
  return w;
}

// AutoAWQ's GEMM packing: int32 word c of a row holds columns 8c + kAwqOrder[i] in nibble i.
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

Result<GroupedIntWeight> decode_awq(const Module& m, const PackedConfig& c) {
  PAGODA_ASSIGN_OR_RETURN(Raw qw, raw(m, "qweight", "I32", 2));
  PAGODA_ASSIGN_OR_RETURN(Raw qz, raw(m, "qzeros", "I32", 2));
  const int64_t K = qw.dim(0), N = qw.dim(1) * 8;
  const int64_t group = c.group_size == -1 ? K : c.group_size;
  if (K % group != 0) return invalid_argument("'{}': group_size {} does not divide K = {}", m.prefix, group, K);
  const int64_t G = K / group;
  PAGODA_RETURN_IF_ERROR(expect_shape(qz, {G, N / 8}, fmt::format("4-bit zero points of {} groups packed along N", G)));
  int nibble_of[8];
  for (int i = 0; i < 8; ++i) nibble_of[kAwqOrder[i]] = i;
  GroupedIntWeight w;
  w.n = N;
  w.k = K;
  w.group = group;
  w.bits = 4;
  PAGODA_ASSIGN_OR_RETURN(w.scales, read_scales(m, "scales", N, G, /*transposed=*/true));
  w.codes.resize(static_cast<size_t>(N * K));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n)
      w.codes[static_cast<size_t>(n * K + k)] = static_cast<uint8_t>((qw.u32(k * (N / 8) + n / 8) >> (4 * nibble_of[n % 8])) & 15);
  w.zeros.resize(static_cast<size_t>(N * G));
  for (int64_t g = 0; g < G; ++g)
    for (int64_t n = 0; n < N; ++n)
      w.zeros[static_cast<size_t>(n * G + g)] = static_cast<int32_t>((qz.u32(g * (N / 8) + n / 8) >> (4 * nibble_of[n % 8])) & 15);
  return w;
}

// compressed-tensors' dense packing (pack_to_int32): element i of a packed row sits at bit i * bits
// of the row's int32 words, as the unsigned code (signed value + 2^(bits-1)).
uint32_t dense_code(const Raw& r, int64_t row_words, int64_t row, int64_t i, int bits) {
  const int64_t bit = i * bits;
  return (r.u32(row * row_words + bit / 32) >> (bit % 32)) & ((1u << bits) - 1);
}

Result<GroupedIntWeight> decode_compressed_tensors(const Module& m, const PackedConfig& c, std::vector<int32_t>* order) {
  PAGODA_ASSIGN_OR_RETURN(Raw shape, raw(m, "weight_shape", "I64", 1));
  PAGODA_RETURN_IF_ERROR(expect_shape(shape, {2}, "the weight's [N, K]"));
  int64_t NK[2];
  std::memcpy(NK, shape.data, 16);
  const int64_t N = NK[0], K = NK[1];
  if (N <= 0 || K <= 0 || N > (int64_t{1} << 31) || K > (int64_t{1} << 31))
    return invalid_argument("tensor '{}' holds [{}, {}], not a weight shape", shape.name, N, K);
  PAGODA_ASSIGN_OR_RETURN(Raw packed, raw(m, "weight_packed", "I32", 2));
  if (packed.dim(0) != N) return invalid_argument("tensor '{}' has shape {}, expected {} rows (weight_shape)", packed.name, shape_str(packed.info->shape), N);
  int bits = 0;
  for (int b : c.ct_bits)
    if (packed.dim(1) == (K * b + 31) / 32) bits = b;
  if (bits == 0)
    return invalid_argument("tensor '{}' has shape {}: for K = {} that is no num_bits of the config ({} words a row "
                            "for 4 bits, {} for 8)", packed.name, shape_str(packed.info->shape), K, (K * 4 + 31) / 32,
                            (K * 8 + 31) / 32);
  auto sit = m.parts.find("weight_scale");
  if (sit == m.parts.end()) return not_found("quantized module '{}' has no tensor '{}.weight_scale'", m.prefix, m.prefix);
  const auto& sshape = sit->second->info->shape;
  if (sshape.size() != 2 || sshape[0] != N || sshape[1] <= 0 || K % sshape[1] != 0)
    return invalid_argument("tensor '{}.weight_scale' has shape {}, expected [{}, G] with G dividing K = {}", m.prefix,
                            shape_str(sshape), N, K);
  const int64_t G = sshape[1], group = K / G;
  PAGODA_ASSIGN_OR_RETURN(*order, act_order(m, "weight_g_idx", K, group, file_of(m, "weight_g_idx")));
  GroupedIntWeight w;
  w.n = N;
  w.k = K;
  w.group = group;
  w.bits = bits;
  PAGODA_ASSIGN_OR_RETURN(w.scales, read_scales(m, "weight_scale", N, G, /*transposed=*/false));
  const int64_t words = packed.dim(1);
  w.codes.resize(static_cast<size_t>(N * K));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) w.codes[static_cast<size_t>(n * K + k)] = static_cast<uint8_t>(dense_code(packed, words, n, k, bits));
  const int32_t offset = 1 << (bits - 1);
  w.zeros.assign(static_cast<size_t>(N * G), offset);
  if (m.parts.count("weight_zero_point")) {
    if (c.ct_symmetric)
      return invalid_argument("tensor '{}.weight_zero_point' in a symmetric scheme (the config says symmetric: true)", m.prefix);
    // Packed along N (pack_to_int32's packed_dim 0): [ceil(N * bits / 32), G]; column g's words
    // are the dense packing of the N zero points of group g.
    PAGODA_ASSIGN_OR_RETURN(Raw zp, raw(m, "weight_zero_point", "I32", 2));
    const int64_t zwords = (N * bits + 31) / 32;
    PAGODA_RETURN_IF_ERROR(expect_shape(zp, {zwords, G}, fmt::format("{}-bit zero points packed along N", bits)));
    for (int64_t g = 0; g < G; ++g)
      for (int64_t n = 0; n < N; ++n) {
        const int64_t bit = n * bits;
        const uint32_t code = (zp.u32((bit / 32) * G + g) >> (bit % 32)) & ((1u << bits) - 1);
        w.zeros[static_cast<size_t>(n * G + g)] = static_cast<int32_t>(code);
      }
  } else if (!c.ct_symmetric) {
    return not_found("quantized module '{}' has no tensor '{}.weight_zero_point' (the scheme is asymmetric)", m.prefix, m.prefix);
  }
  reorder_columns(w, *order);
  return w;
}

// FP8 E4M3 weight [N, K] with one scale or one per row [N, 1]: F8E4M3Rows rows (the codes, each
// row with its scale as f32, exact). Per block [ceil(N / bn), ceil(K / bk)]: the codes times their
// block's scale, rounded to bf16 (exact products in f32, then |error| <= 2^-9 of the value).
Result<Tensor> decode_fp8(const Module& m, const PackedConfig& c) {
  PAGODA_ASSIGN_OR_RETURN(Raw w, raw(m, "weight", "F8_E4M3", 2));
  const int64_t N = w.dim(0), K = w.dim(1);
  auto it = m.parts.find(c.fp8_scale);
  if (it == m.parts.end()) return not_found("FP8 weight '{}' has no tensor '{}.{}'", w.name, m.prefix, c.fp8_scale);
  PAGODA_ASSIGN_OR_RETURN(Raw sc, raw(m, c.fp8_scale, it->second->info->dtype_name, it->second->info->shape.size()));
  const std::string& dt = sc.info->dtype_name;
  if (dt != "F32" && dt != "BF16" && dt != "F16")
    return invalid_argument("tensor '{}' has dtype {}, expected F32, BF16 or F16", sc.name, dt);
  // Scale grid [SR, SC]; a cell covers br x bc weights: one scale ([], [1], [1, 1]), one per row
  // ([N], [N, 1]), or the configured blocks ([ceil(N / rows), ceil(K / cols)]).
  const auto& ss = sc.info->shape;
  int64_t numel = 1;
  for (int64_t d : ss) numel *= d;
  int64_t br = N, bc = K, SR = 1, SC = 1;
  if (c.fp8_block[0] > 0) {
    br = c.fp8_block[0];
    bc = c.fp8_block[1];
    SR = (N + br - 1) / br;
    SC = (K + bc - 1) / bc;
    if (ss != std::vector<int64_t>{SR, SC})
      return invalid_argument("tensor '{}' has shape {}, expected [{}, {}] (blocks of {} x {} over [{}, {}])", sc.name,
                              shape_str(ss), SR, SC, br, bc, N, K);
  } else if (numel == N && ss.size() >= 1 && ss[0] == N && (ss.size() == 1 || ss[1] == 1)) {
    br = 1;
    SR = N;
  } else if (numel != 1) {
    return invalid_argument("tensor '{}' has shape {}: not one scale or one per row of [{}, {}] (block scales need "
                            "weight_block_size / block_structure in the config)", sc.name, shape_str(ss), N, K);
  }
  auto scale_at = [&](int64_t i) -> float {
    if (dt == "F32") {
      float f;
      std::memcpy(&f, sc.data + 4 * i, 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, sc.data + 2 * i, 2);
    return dt == "BF16" ? bf16_to_f32(h) : fp16_to_f32(h);
  };
  if (c.fp8_block[0] <= 0) {
    // One scale per tensor or per row: the E4M3 codes as they are, each row with its f32 scale.
    Tensor out = Tensor::empty(DType::kF8E4M3Rows, {N, K});
    for (int64_t n = 0; n < N; ++n) {
      uint8_t* row = out.row_ptr(n);
      const float s = scale_at(SR == 1 ? 0 : n);
      std::memcpy(row, &s, 4);
      std::memcpy(row + 4, w.data + n * K, static_cast<size_t>(K));
    }
    return out;
  }
  Tensor out = Tensor::empty(DType::kBF16, {N, K});
  uint16_t* o = out.data_as<uint16_t>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const float s = scale_at(SR == 1 && SC == 1 ? 0 : (n / br) * SC + k / bc);
      o[n * K + k] = quant::fp8_e4m3_scaled_to_bf16(w.data[n * K + k], s);
    }
  return out;
}

// The checkpoint tensor suffixes that mark a quantized module, and every suffix it may have.
struct Suffixes {
  const char* marker;
  std::vector<std::string> all;
};

Suffixes suffixes_of(Method m) {
  switch (m) {
    case Method::kGptq: return {"qweight", {"qweight", "qzeros", "scales", "g_idx"}};
    case Method::kAwq: return {"qweight", {"qweight", "qzeros", "scales"}};
    case Method::kCompressedTensors:
      return {"weight_packed", {"weight_packed", "weight_scale", "weight_zero_point", "weight_shape", "weight_g_idx"}};
    case Method::kFp8: return {"weight", {"weight", "weight_scale", "weight_scale_inv", "input_scale"}};
  }
  return {"", {}};
}

}  // namespace

Result<std::optional<DType>> packed_int_linear_format(const nlohmann::json& config) {
  auto it = config.find("quantization_config");
  if (it == config.end() || it->is_null()) return std::optional<DType>();
  PAGODA_ASSIGN_OR_RETURN(std::optional<PackedConfig> c, parse_config(*it, "config.json quantization_config"));
  if (!c) return std::optional<DType>();
  if (c->method == Method::kFp8)
    return std::optional<DType>(c->fp8_block[0] > 0 ? DType::kBF16 : DType::kF8E4M3Rows);
  const bool sym = c->method == Method::kGptq ? it->value("sym", true)
                   : c->method == Method::kAwq ? false
                                               : c->ct_symmetric;
  const int bits = c->method == Method::kCompressedTensors ? *std::max_element(c->ct_bits.begin(), c->ct_bits.end()) : c->bits;
  if (bits == 8 && !sym) return unimplemented("config.json quantization_config: asymmetric 8-bit weights have no exact native layout");
  return std::optional<DType>(bits == 8 ? DType::kQ8_0 : sym ? DType::kQ4_0 : DType::kQ4_1);
}

Result<std::optional<PackedIntCheckpoint>> decode_packed_int_checkpoint(const HfModelDir& dir, int threads) {
  PAGODA_ASSIGN_OR_RETURN(std::optional<PackedConfig> config, find_config(dir));
  if (!config) {
    for (const auto& [name, e] : dir.tensors())
      if (name.ends_with(".qweight") || name.ends_with(".weight_packed"))
        return invalid_argument("{}: tensor '{}' is a packed quantized weight, but {} has no quantization_config",
                                dir.dir(), name, dir.config_path());
    return std::optional<PackedIntCheckpoint>();
  }
  const Suffixes sfx = suffixes_of(config->method);
  const bool fp8 = config->method == Method::kFp8;
  std::map<std::string, Module> modules;
  for (const auto& [name, e] : dir.tensors()) {
    for (const std::string& s : sfx.all) {
      if (name.size() <= s.size() + 1 || !name.ends_with("." + s)) continue;
      const std::string prefix = name.substr(0, name.size() - s.size() - 1);
      modules[prefix].prefix = prefix;
      modules[prefix].parts[s] = &e;
    }
  }
  std::vector<const Module*> jobs;
  for (const auto& [prefix, m] : modules) {
    if (fp8) {
      // Only the modules whose weight is FP8; the others (norms, embeddings, lm_head) stay.
      auto w = m.parts.find("weight");
      if (w == m.parts.end() || w->second->info->dtype_name != "F8_E4M3") {
        if (m.parts.count(config->fp8_scale) && w != m.parts.end())
          return invalid_argument("{}: '{}.weight' has dtype {} beside a '{}' (FP8 weights are F8_E4M3)", dir.dir(), prefix,
                                  w->second->info->dtype_name, config->fp8_scale);
        continue;
      }
      jobs.push_back(&m);
      continue;
    }
    if (!m.parts.count(sfx.marker))
      return invalid_argument("{}: tensor '{}.{}' has no '{}.{}' beside it", dir.dir(), prefix, m.parts.begin()->first,
                              prefix, sfx.marker);
    if (dir.find(prefix + ".weight") != nullptr)
      return invalid_argument("{}: module '{}' has both a packed weight and '{}.weight'", dir.dir(), prefix, prefix);
    jobs.push_back(&m);
  }
  if (jobs.empty())
    return invalid_argument("{}: {} says {}, but no tensor ends in '.{}'", dir.dir(), config->source, config->name, sfx.marker);

  std::vector<Result<Tensor>> out(jobs.size(), Status(StatusCode::kInternal, "not decoded"));
  std::vector<std::vector<int32_t>> orders(jobs.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      const Module& m = *jobs[i];
      if (fp8) {
        out[i] = decode_fp8(m, *config);
        continue;
      }
      Result<GroupedIntWeight> w = config->method == Method::kGptq  ? decode_gptq(m, *config, &orders[i])
                                   : config->method == Method::kAwq ? decode_awq(m, *config)
                                                                    : decode_compressed_tensors(m, *config, &orders[i]);
      if (!w.ok()) {
        out[i] = w.status();
        continue;
      }
      auto format = quant::native_format(*w, "'" + m.prefix + "'");
      if (!format.ok()) {
        out[i] = format.status();
        continue;
      }
      Tensor t = Tensor::empty(*format, {w->n, w->k});
      quant::write_native_rows(*w, *format, t.data());
      out[i] = std::move(t);
    }
  };
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int n = std::max(1, std::min<int>(threads, static_cast<int>(jobs.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();

  if (fp8 && config->fp8_block[0] > 0)
    log_info("load", "{}: FP8 weights with {} x {} block scales run as bf16 (only per-tensor and per-channel scales "
             "stay FP8 on the GPU)", dir.dir(), config->fp8_block[0], config->fp8_block[1]);
  PackedIntCheckpoint ckpt;
  ckpt.method = config->name;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (!out[i].ok())
      return Status(out[i].status().code(), fmt::format("{} ({} checkpoint): {}", dir.dir(), config->name, out[i].status().message()));
    ckpt.weights.emplace(jobs[i]->prefix + ".weight", std::move(out[i]).value());
    if (!orders[i].empty()) {
      Tensor o = Tensor::empty(DType::kI32, {static_cast<int64_t>(orders[i].size())});
      std::memcpy(o.data(), orders[i].data(), orders[i].size() * 4);
      ckpt.weights.emplace(jobs[i]->prefix + ".input_order", std::move(o));
    }
    for (const auto& [s, e] : jobs[i]->parts) ckpt.consumed.insert(jobs[i]->prefix + "." + s);
  }
  return std::optional<PackedIntCheckpoint>(std::move(ckpt));
}

}  // namespace pagoda
