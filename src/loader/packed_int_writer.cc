#include "loader/packed_int_writer.h"

#include <cstring>

#include "common/half.h"

namespace pagoda {
namespace {

using Format = PackedIntSpec::Format;

// v [R, C] (row-major) -> [ceil(R / per), C]: word (r, c) holds rows r * per + j, j = 0.., in
// slot j (bits * j). Unmasked, as numpy's `|=` of the shifted values.
std::vector<uint32_t> pack_along_rows(const std::vector<uint32_t>& v, int64_t R, int64_t C, int bits) {
  const int64_t per = 32 / bits, out_rows = (R + per - 1) / per;
  std::vector<uint32_t> out(static_cast<size_t>(out_rows * C), 0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) out[static_cast<size_t>((r / per) * C + c)] |= v[static_cast<size_t>(r * C + c)] << (bits * (r % per));
  return out;
}

// v [R, C] -> [R, ceil(C / per)]: word (r, w) holds columns w * per + order[i] in slot i.
std::vector<uint32_t> pack_along_cols(const std::vector<uint32_t>& v, int64_t R, int64_t C, int bits,
                                      const int* order = nullptr) {
  const int64_t per = 32 / bits, words = (C + per - 1) / per;
  std::vector<uint32_t> out(static_cast<size_t>(R * words), 0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t w = 0; w < words; ++w)
      for (int64_t i = 0; i < per; ++i) {
        const int64_t c = w * per + (order ? order[i] : i);
        if (c < C) out[static_cast<size_t>(r * words + w)] |= v[static_cast<size_t>(r * C + c)] << (bits * i);
      }
  return out;
}

template <class T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// [R, C] row-major -> [C, R].
template <class T>
std::vector<T> transpose(const std::vector<T>& v, int64_t R, int64_t C) {
  std::vector<T> t(v.size());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) t[static_cast<size_t>(c * R + r)] = v[static_cast<size_t>(r * C + c)];
  return t;
}

int64_t group_of(const PackedIntSpec& s, int64_t k) { return s.group == -1 ? k : s.group; }

Status check_shape(const PackedIntSpec& s, int64_t n, int64_t k) {
  PAGODA_RETURN_IF_ERROR(s.validate());
  if (n <= 0 || k <= 0) return invalid_argument("a [{}, {}] weight has nothing to quantize", n, k);
  const int64_t g = group_of(s, k);
  if (s.format != Format::kFp8 && k % g != 0)
    return invalid_argument("group size {} does not divide the {} input features", g, k);
  if (s.format == Format::kAwq && n % 8 != 0) return invalid_argument("AWQ packs 8 output features a word: {} is not a multiple of 8", n);
  return Status();
}

}  // namespace

Status PackedIntSpec::validate() const {
  if (format == Format::kFp8) return Status();
  if (bits != 4 && bits != 8) return invalid_argument("{} bits: the formats written are 4- and 8-bit", bits);
  if (group != -1 && (group <= 0 || group % 32 != 0))
    return invalid_argument("group size {}: -1 (per channel) or a positive multiple of 32 (the engine's blocks hold 32)", group);
  if (format == Format::kAwq && (bits != 4 || symmetric))
    return invalid_argument("AWQ GEMM checkpoints are 4-bit with zero points (asymmetric)");
  return Status();
}

std::string PackedIntSpec::to_string() const {
  const std::string g = group == -1 ? std::string("channel") : fmt::format("g{}", group);
  switch (format) {
    case Format::kGptq: return fmt::format("gptq w{} {} {} ({})", bits, g, symmetric ? "sym" : "asym", gptq_v2 ? "gptq_v2" : "v1");
    case Format::kAwq: return fmt::format("awq gemm w4 {}", g);
    case Format::kCompressedTensors:
      return fmt::format("compressed-tensors w{}a16 {} {} {} scales", bits, g, symmetric ? "sym" : "asym",
                         ct_scale == quant::ScaleRounding::kBf16 ? "bf16" : "f16");
    case Format::kFp8: return "compressed-tensors fp8 w8a8 (channel weights, dynamic per-token activations)";
  }
  return "?";
}

Result<std::vector<PackedTensor>> packed_layout(const PackedIntSpec& s, int64_t n, int64_t k) {
  PAGODA_RETURN_IF_ERROR(check_shape(s, n, k));
  const int64_t G = s.format == Format::kFp8 ? 1 : k / group_of(s, k);
  const int64_t per = 32 / s.bits;
  std::vector<PackedTensor> t;
  switch (s.format) {
    case Format::kGptq:
      t.push_back({"qweight", "I32", {(k + per - 1) / per, n}, {}});
      t.push_back({"qzeros", "I32", {G, (n + per - 1) / per}, {}});
      t.push_back({"scales", "F16", {G, n}, {}});
      t.push_back({"g_idx", "I32", {k}, {}});
      break;
    case Format::kAwq:
      t.push_back({"qweight", "I32", {k, n / 8}, {}});
      t.push_back({"qzeros", "I32", {G, n / 8}, {}});
      t.push_back({"scales", "F16", {G, n}, {}});
      break;
    case Format::kCompressedTensors:
      t.push_back({"weight_packed", "I32", {n, (k + per - 1) / per}, {}});
      t.push_back({"weight_scale", s.ct_scale == quant::ScaleRounding::kBf16 ? "BF16" : "F16", {n, G}, {}});
      if (!s.symmetric) t.push_back({"weight_zero_point", "I32", {(n + per - 1) / per, G}, {}});
      t.push_back({"weight_shape", "I64", {2}, {}});
      break;
    case Format::kFp8:
      t.push_back({"weight", "F8_E4M3", {n, k}, {}});
      t.push_back({"weight_scale", "F32", {n, 1}, {}});
      break;
  }
  return t;
}

Result<std::vector<PackedTensor>> pack_linear(const PackedIntSpec& s, const float* w, int64_t n, int64_t k) {
  PAGODA_ASSIGN_OR_RETURN(std::vector<PackedTensor> t, packed_layout(s, n, k));
  if (s.format == Format::kFp8) {
    const quant::Fp8Rows f = quant::fp8_e4m3_per_row(w, n, k);
    t[0].bytes = f.codes;
    t[1].bytes = as_bytes(f.scales);
    return t;
  }
  const int64_t g = group_of(s, k), G = k / g;
  const int bits = s.bits;
  std::vector<float> scales_f32;
  const quant::GroupedIntWeight q =
      s.format == Format::kGptq ? quant::rtn_gptq(w, n, k, bits, g, s.symmetric)
      : s.format == Format::kAwq ? quant::rtn_awq(w, n, k, g)
                                 : quant::rtn_ct(w, n, k, bits, g, s.symmetric, s.ct_scale, &scales_f32);
  std::vector<uint32_t> codes(q.codes.begin(), q.codes.end());                         // [n, k]
  std::vector<uint32_t> zeros(q.zeros.begin(), q.zeros.end());                         // [n, G]
  if (s.format == Format::kGptq || s.format == Format::kAwq) {
    static constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    const std::vector<uint32_t> codes_t = transpose(codes, n, k);  // [k, n]
    const std::vector<uint32_t> zeros_t = transpose(zeros, n, G);  // [G, n]
    if (s.format == Format::kGptq) {
      t[0].bytes = as_bytes(pack_along_rows(codes_t, k, n, bits));
      std::vector<uint32_t> qz = pack_along_cols(zeros_t, G, n, bits);
      if (!s.gptq_v2) {
        uint32_t ones = 0;
        for (int j = 0; j < 32 / bits; ++j) ones += 1u << (bits * j);
        for (uint32_t& x : qz) x -= ones;  // v1: stored zero - 1, one 32-bit subtraction (borrows as GPTQModel's)
      }
      t[1].bytes = as_bytes(qz);
      t[2].bytes = as_bytes(transpose(q.scales, n, G));
      std::vector<int32_t> gidx(static_cast<size_t>(k));
      for (int64_t c = 0; c < k; ++c) gidx[static_cast<size_t>(c)] = static_cast<int32_t>(c / g);
      t[3].bytes = as_bytes(gidx);
    } else {
      t[0].bytes = as_bytes(pack_along_cols(codes_t, k, n, 4, kAwqOrder));
      t[1].bytes = as_bytes(pack_along_cols(zeros_t, G, n, 4, kAwqOrder));
      t[2].bytes = as_bytes(transpose(q.scales, n, G));
    }
    return t;
  }
  // compressed-tensors pack-quantized (codes and zeros already offset by 2^(bits-1)).
  size_t i = 0;
  t[i++].bytes = as_bytes(pack_along_cols(codes, n, k, bits));
  std::vector<uint16_t> sc(scales_f32.size());
  for (size_t j = 0; j < sc.size(); ++j)
    sc[j] = s.ct_scale == quant::ScaleRounding::kBf16 ? f32_to_bf16(scales_f32[j]) : f32_to_fp16(scales_f32[j]);
  t[i++].bytes = as_bytes(sc);
  if (!s.symmetric) {
    const std::vector<uint32_t> zp = pack_along_cols(transpose(zeros, n, G), G, n, bits);  // [G, ceil(n / per)]
    t[i++].bytes = as_bytes(transpose(zp, G, (n + 32 / bits - 1) / (32 / bits)));
  }
  t[i++].bytes = as_bytes(std::vector<int64_t>{n, k});
  return t;
}

nlohmann::json quantization_config(const PackedIntSpec& s) {
  using json = nlohmann::json;
  switch (s.format) {
    case Format::kGptq:
      return {{"quant_method", "gptq"}, {"bits", s.bits}, {"group_size", s.group}, {"sym", s.symmetric},
              {"desc_act", false}, {"static_groups", false}, {"true_sequential", true}, {"damp_percent", 0.01},
              {"checkpoint_format", s.gptq_v2 ? "gptq_v2" : "gptq"}, {"lm_head", false}};
    case Format::kAwq:
      return {{"quant_method", "awq"}, {"bits", 4}, {"group_size", s.group}, {"zero_point", true},
              {"version", "gemm"}, {"modules_to_not_convert", nullptr}};
    case Format::kFp8:
      return {{"quant_method", "compressed-tensors"}, {"format", "float-quantized"}, {"quantization_status", "compressed"},
              {"config_groups",
               {{"group_0",
                 {{"targets", json::array({"Linear"})},
                  {"format", "float-quantized"},
                  {"weights", {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"strategy", "channel"},
                               {"dynamic", false}, {"observer", "minmax"}}},
                  {"input_activations", {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"strategy", "token"},
                                         {"dynamic", true}}}}}}},
              {"ignore", json::array({"lm_head"})}, {"kv_cache_scheme", nullptr}};
    case Format::kCompressedTensors: {
      json weights = {{"num_bits", s.bits}, {"type", "int"}, {"symmetric", s.symmetric},
                      {"strategy", s.group == -1 ? "channel" : "group"},
                      {"group_size", s.group == -1 ? json(nullptr) : json(s.group)},
                      {"dynamic", false}, {"actorder", nullptr}, {"observer", "minmax"}};
      return {{"quant_method", "compressed-tensors"}, {"format", "pack-quantized"}, {"quantization_status", "compressed"},
              {"config_groups",
               {{"group_0",
                 {{"targets", json::array({"Linear"})}, {"input_activations", nullptr}, {"output_activations", nullptr},
                  {"format", "pack-quantized"}, {"weights", weights}}}}},
              {"ignore", json::array({"lm_head"})}, {"kv_cache_scheme", nullptr}};
    }
  }
  return nullptr;
}

}  // namespace pagoda
