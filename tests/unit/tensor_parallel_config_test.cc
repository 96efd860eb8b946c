// EngineConfig::tensor_parallel_size at the engine's entry (resolve_layer_split, which every engine
// creation passes): 1 runs, more is refused naming the missing multi-GPU executor, below 1 is invalid.
#include <gtest/gtest.h>

#include "engine/engine_config.h"

namespace pagoda {
namespace {

TEST(TensorParallelConfig, OneRunsMoreIsRefusedByName) {
  EngineConfig c;
  c.device = "cpu";
  EXPECT_TRUE(resolve_layer_split(c).ok());
  c.tensor_parallel_size = 2;
  auto r = resolve_layer_split(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("multi-GPU execution is not built yet"), std::string::npos) << r.status().message();
  c.tensor_parallel_size = 0;
  r = resolve_layer_split(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pagoda
