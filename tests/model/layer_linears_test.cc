// layer_linears (model/layer_linears.h) on real families' tiny models, and the weight offload
// planner (runtime/weight_offload_plan.h) that consumes it.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "model/layer_linears.h"
#include "model/model_loader.h"
#include "runtime/weight_offload_plan.h"
#include "test_paths.h"

namespace pagoda {
namespace {

// Every linear a forward pass names lands in exactly one layer or outside; every layer of a
// family names its attention and MLP weights; an MoE layer names all its experts; the output
// projection is outside.
TEST(LayerLinears, EachLayerOwnsItsWeightsOnce) {
  for (const std::string name : {"llama3/model-f32.gguf", "gemma3/model-f32.gguf", "mixtral/model-f32.gguf",
                                 "qwen2-moe/model-f32.gguf", "phi3/model-f32.gguf"}) {
    SCOPED_TRACE(name);
    auto m = load_model(test::models_dir() + "/tiny/" + name);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    const Model& model = *m->model;
    const LayerLinears ll = layer_linears(model);
    ASSERT_EQ(static_cast<int64_t>(ll.layers.size()), model.config().num_layers);
    std::set<int32_t> seen;
    for (const auto& ids : ll.layers) {
      EXPECT_GE(ids.size(), 3u);  // q/k/v, o, and the MLP (gate/up, down) or router + experts
      for (LinearId id : ids) EXPECT_TRUE(seen.insert(id.index).second) << "linear " << id.index << " in two layers";
    }
    for (LinearId id : ll.outside) EXPECT_TRUE(seen.insert(id.index).second);
    EXPECT_EQ(ll.outside.size(), 1u);
    EXPECT_EQ(ll.outside.front().index, model.weights().output.index);
    const ModelWeights& w = model.weights();
    EXPECT_EQ(seen.size(), w.linears.size()) << "a linear entry no forward pass names";
    for (const ExpertSet& set : w.expert_sets) {
      // A set's experts all belong to the one layer that names its first.
      int64_t layer = -1;
      for (size_t l = 0; l < ll.layers.size(); ++l)
        for (LinearId id : ll.layers[l])
          if (id.index == set.gate_up.front().index) layer = static_cast<int64_t>(l);
      ASSERT_GE(layer, 0);
      std::set<int32_t> in_layer;
      for (LinearId id : ll.layers[static_cast<size_t>(layer)]) in_layer.insert(id.index);
      for (const auto* ids : {&set.gate_up, &set.down})
        for (LinearId id : *ids) EXPECT_TRUE(in_layer.count(id.index)) << set.name;
    }
  }
}

TEST(WeightOffloadPlan, FewestLayersSpreadEvenly) {
  const std::vector<int64_t> layers(32, 100);
  const WeightOffloadPlan none = plan_weight_offload(layers, 0);
  EXPECT_EQ(none.num_streamed(), 0);
  EXPECT_EQ(none.streamed_bytes, 0);
  EXPECT_EQ(none.device_saving(), 0);

  const WeightOffloadPlan p = plan_weight_offload(layers, 750);  // 7.5 layers: 8 stream
  EXPECT_EQ(p.num_streamed(), 8);
  EXPECT_EQ(p.streamed_bytes, 800);
  EXPECT_EQ(p.slot_bytes, 100);
  EXPECT_EQ(p.slots, 2);
  EXPECT_EQ(p.device_saving(), 600);
  // Spread: every fourth layer (3, 7, ..., 31), no two adjacent.
  for (int l = 0; l < 32; ++l) EXPECT_EQ(p.streamed[l], l % 4 == 3) << l;

  const WeightOffloadPlan one = plan_weight_offload(layers, 1);
  EXPECT_EQ(one.num_streamed(), 1);
  EXPECT_EQ(one.slots, 1);
  EXPECT_EQ(one.device_saving(), 0);

  const WeightOffloadPlan all = plan_weight_offload(layers, 1 << 20);
  EXPECT_EQ(all.num_streamed(), 32);
  EXPECT_EQ(all.device_saving(), 3000);
  EXPECT_NE(all.summary().find("32 of 32 layers"), std::string::npos) << all.summary();
}

TEST(WeightOffloadPlan, UnevenLayersSizeTheSlotsByTheLargest) {
  std::vector<int64_t> layers = {100, 300, 100, 100, 100, 100};
  const WeightOffloadPlan p = plan_weight_offload(layers, 350);
  EXPECT_GE(p.streamed_bytes, 350);
  int64_t largest = 0;
  for (size_t l = 0; l < layers.size(); ++l)
    if (p.streamed[l]) largest = std::max(largest, layers[l]);
  EXPECT_EQ(p.slot_bytes, largest);
}

TEST(WeightOffloadPlan, ToFitStreamsOnlyWhatTheBudgetNeeds) {
  const std::vector<int64_t> layers(16, 1000);
  // Fits already: nothing streams.
  EXPECT_EQ(plan_weight_offload_to_fit(layers, 500, 16500).num_streamed(), 0);
  // 2500 over: the device saving (streamed - 2 slots) must reach it: 5 layers save 3000.
  const WeightOffloadPlan p = plan_weight_offload_to_fit(layers, 500, 14000);
  EXPECT_EQ(p.num_streamed(), 5);
  EXPECT_LE(16500 - p.device_saving(), 14000);
  EXPECT_GT(16500 - plan_weight_offload(layers, 4000).device_saving(), 14000);  // 4 layers would not do
  // Not even the outside weights and two slots fit: refused.
  const WeightOffloadPlan no = plan_weight_offload_to_fit(layers, 500, 2000);
  EXPECT_LT(no.streamed_bytes, 0);
  EXPECT_EQ(no.num_streamed(), 0);
}

}  // namespace
}  // namespace pagoda
