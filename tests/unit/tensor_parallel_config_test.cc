// EngineConfig::tensor_parallel_size at the engine's entry (resolve_layer_split, which every engine
// creation passes): 1 to 64 ranks run, other sizes are invalid.
#include <gtest/gtest.h>

#include "engine/engine_config.h"

namespace pagoda {
namespace {

TEST(TensorParallelConfig, OneToSixtyFourRunOthersAreInvalid) {
  EngineConfig c;
  c.device = "cpu";
  for (int n : {1, 2, 64}) {
    c.tensor_parallel_size = n;
    EXPECT_TRUE(resolve_layer_split(c).ok()) << n;
  }
  for (int n : {0, -1, 65}) {
    c.tensor_parallel_size = n;
    auto r = resolve_layer_split(c);
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--tensor-parallel-size"), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace pagoda
