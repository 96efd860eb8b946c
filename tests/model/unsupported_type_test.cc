// GGUF types the engine reads but cannot compute with (the grid-codebook i-quants, mxfp4) fail the
// load with an error that names the tensor and the type and says what to use instead; the low-bit
// types it computes with pass the table check.
#include <gtest/gtest.h>

#include "model/tensor_table.h"

namespace pagoda {
namespace {

Status check_linear_of(DType t) {
  const std::vector<TensorDecl> table = {{"blk.0.attn_q.weight", "q", {4, 256}, true, true, 0}};
  Tensor w = Tensor::zeros(t, {4, 256});
  return validate_tensor_table(table, WeightNaming::kGguf, [&](const std::string&) -> Result<const Tensor*> { return &w; });
}

TEST(UnsupportedType, GridIQuantsSayWhatToUse) {
  for (DType t : {DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S, DType::kIQ3_XXS, DType::kIQ3_S, DType::kIQ1_S,
                  DType::kIQ1_M}) {
    const Status s = check_linear_of(t);
    ASSERT_FALSE(s.ok()) << dtype_name(t);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
    const std::string msg = s.to_string();
    EXPECT_NE(msg.find("blk.0.attn_q.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unsupported type " + std::string(dtype_name(t))), std::string::npos) << msg;
    EXPECT_NE(msg.find("use a Q2_K"), std::string::npos) << msg;
  }
}

TEST(UnsupportedType, LowBitTypesPass) {
  for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kTQ1_0, DType::kTQ2_0})
    EXPECT_TRUE(check_linear_of(t).ok()) << dtype_name(t);
}

}  // namespace
}  // namespace pagoda
