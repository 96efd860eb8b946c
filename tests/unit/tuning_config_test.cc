// The tuning knobs (common/tuning_config.h) and their environment variables (common/env_config.h):
// defaults are the product's path, each variable sets its field, bad values are errors that name
// the variable, and nothing is half-applied.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "common/env_config.h"
#include "common/tuning_config.h"

namespace pagoda {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(TuningConfig, DefaultsAreValidAndPrintOnOneLine) {
  const TuningConfig t;
  EXPECT_TRUE(t.validate().ok());
  EXPECT_EQ(t.to_string(),
            "row attention auto | prefill attention auto | simt heads auto | gemv rows 1 | quant weights native (gemv rows 8, mma rows 0) | sparsity off "
            "(from 2 rows) | profile off | block trace off | graph capture lazy");
}

TEST(TuningConfig, EachVariableSetsItsField) {
  TuningConfig t;
  ASSERT_TRUE(apply_tuning_vars(t, env_of({{"PAGODA_ROW_ATTENTION", "simt"},
                                           {"PAGODA_PREFILL_ATTENTION", "mma"},
                                           {"PAGODA_SIMT_HEADS", "2"},
                                           {"PAGODA_GEMV_MAX_ROWS", "4"},
                                           {"PAGODA_QUANT_WEIGHTS", "dequantize"},
                                           {"PAGODA_QUANT_GEMV_MAX_ROWS", "2"},
                                           {"PAGODA_QUANT_MMA_MAX_ROWS", "16"},
                                           {"PAGODA_CUDA_PROFILE", "1"},
                                           {"PAGODA_BLOCK_TRACE", "/tmp/trace.bin"},
                                           {"PAGODA_GRAPH_CAPTURE", "start"},
                                           {"PAGODA_SPARSITY", "2:4"},
                                           {"PAGODA_SPARSE_MIN_ROWS", "9"}}))
                  .ok());
  EXPECT_EQ(t.graph_capture, "start");
  EXPECT_EQ(t.row_attention, "simt");
  EXPECT_EQ(t.prefill_attention, "mma");
  EXPECT_EQ(t.simt_heads, 2);
  EXPECT_EQ(t.gemv_max_rows, 4);
  EXPECT_TRUE(t.cuda_profile);
  EXPECT_EQ(t.block_trace, "/tmp/trace.bin");
  EXPECT_EQ(t.quant_weights, "dequantize");
  EXPECT_EQ(t.quant_gemv_max_rows, 2);
  EXPECT_EQ(t.quant_mma_max_rows, 16);
  EXPECT_EQ(t.sparsity, "2:4");
  EXPECT_EQ(t.sparse_min_rows, 9);
  EXPECT_EQ(t.to_string(),
            "row attention simt | prefill attention mma | simt heads 2 | gemv rows 4 | quant weights dequantize (gemv rows 2, mma rows 16) | sparsity 2:4 "
            "(from 9 rows) | profile on | block trace /tmp/trace.bin | graph capture start");
  // PAGODA_CUDA_PROFILE=0 is off; unset variables leave their fields alone.
  ASSERT_TRUE(apply_tuning_vars(t, env_of({{"PAGODA_CUDA_PROFILE", "0"}})).ok());
  EXPECT_FALSE(t.cuda_profile);
  EXPECT_EQ(t.gemv_max_rows, 4);
}

TEST(TuningConfig, BadValuesNameTheVariableAndChangeNothing) {
  const std::map<std::string, std::string> bad[] = {
      {{"PAGODA_ROW_ATTENTION", "tensor"}}, {{"PAGODA_PREFILL_ATTENTION", "wgmma"}}, {{"PAGODA_GRAPH_CAPTURE", "eager"}}, {{"PAGODA_SIMT_HEADS", "3"}},   {{"PAGODA_SIMT_HEADS", "two"}},
      {{"PAGODA_GEMV_MAX_ROWS", "5"}},      {{"PAGODA_GEMV_MAX_ROWS", "-1"}}, {{"PAGODA_GEMV_MAX_ROWS", "1x"}},
      {{"PAGODA_QUANT_WEIGHTS", "bf16"}},   {{"PAGODA_QUANT_GEMV_MAX_ROWS", "9"}},
      {{"PAGODA_QUANT_MMA_MAX_ROWS", "65"}},    {{"PAGODA_QUANT_MMA_MAX_ROWS", "-2"}},
      {{"PAGODA_SPARSITY", "4:8"}},         {{"PAGODA_SPARSE_MIN_ROWS", "0"}}, {{"PAGODA_SPARSE_MIN_ROWS", "10"}},
  };
  for (const auto& vars : bad) {
    TuningConfig t;
    std::map<std::string, std::string> all = vars;
    all["PAGODA_CUDA_PROFILE"] = "1";  // a good variable beside the bad one is not applied either
    const Status s = apply_tuning_vars(t, env_of(all));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << vars.begin()->first << "=" << vars.begin()->second;
    EXPECT_NE(s.message().find(vars.begin()->first), std::string::npos) << s.message();
    EXPECT_FALSE(t.cuda_profile);
    EXPECT_EQ(t.to_string(), TuningConfig{}.to_string());
  }
  TuningConfig t;
  t.gemv_max_rows = 7;
  EXPECT_NE(t.validate().message().find("GEMV rows"), std::string::npos) << t.validate().message();
}

}  // namespace
}  // namespace pagoda
