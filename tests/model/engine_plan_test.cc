// The engine plan cache (engine/engine_plan.h) end to end on SmolLM2 Q4_1: the first start writes
// the plan, the second maps every packed weight from it and gives the same greedy tokens; a plan
// whose section bytes are flipped, one cut short, and one of another model file (the model
// touched) are each reported, not used (the tokens stay the same), and replaced by a valid one
// that the next start reuses.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "common/startup_profile.h"
#include "engine/engine.h"
#include "engine/engine_config.h"
#include "engine_test_util.h"
#include "test_paths.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

// Greedy ids of a fixed prompt, and the start's "model" phase detail (which names the plan state).
struct Start {
  std::vector<int32_t> ids;
  std::string plan;
};

Start start_once(const std::string& model, const std::string& dir) {
  startup_profile::clear();
  EngineConfig cfg = test::base_engine_config(model);
  cfg.plan_cache = dir;
  auto engine = Engine::create(cfg);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  if (!engine.ok()) return {};
  GenerateRequest g;
  g.prompt = "The capital of France is";
  g.sampling.temperature = 0;
  g.stop.max_tokens = 12;
  g.stop.ignore_eos = true;
  auto stream = (*engine)->submit(g);
  EXPECT_TRUE(stream.ok());
  Start s;
  s.ids = test::collect(**stream).tokens[0];
  (*engine)->shutdown();  // joins the plan writer
  for (const auto& p : startup_profile::phases())
    if (p.name == "model") s.plan = p.detail;
  return s;
}

std::string the_plan_file(const std::string& dir) {
  std::string found;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".plan") found = e.path().string();
  return found;
}

TEST(EnginePlan, ReusedPlanGivesTheSameTokensAndDamagedPlansAreRebuilt) {
  const std::string src = test::smollm2_path();
  ASSERT_FALSE(src.empty()) << "models/SmolLM2-135M-Instruct.Q4_1.gguf missing: run scripts/setup.sh";
  const fs::path root = fs::temp_directory_path() / fmt::format("pagoda_engine_plan_{}", ::getpid());
  fs::remove_all(root);
  fs::create_directories(root);
  // A copy of the model: touching it below must not change the shared file.
  const std::string model = (root / "model.gguf").string();
  fs::copy_file(src, model);
  const std::string dir = (root / "plans").string();

  const Start first = start_once(model, dir);
  ASSERT_FALSE(first.ids.empty());
  EXPECT_NE(first.plan.find("plan absent"), std::string::npos) << first.plan;
  const std::string plan = the_plan_file(dir);
  ASSERT_FALSE(plan.empty()) << "no plan written to " << dir;

  const Start second = start_once(model, dir);
  EXPECT_EQ(second.ids, first.ids);
  EXPECT_NE(second.plan.find("plan reused"), std::string::npos) << second.plan;
  EXPECT_EQ(second.plan.find(": 0 of"), std::string::npos) << "a reused plan must map the packed weights: " << second.plan;

  auto damage = [&](const char* what, auto&& fn) {
    fn();
    const Start s = start_once(model, dir);
    EXPECT_EQ(s.ids, first.ids) << what;
    EXPECT_EQ(s.plan.find("plan reused"), std::string::npos) << what << ": a damaged plan was used: " << s.plan;
    const Start again = start_once(model, dir);
    EXPECT_EQ(again.ids, first.ids) << what;
    EXPECT_NE(again.plan.find("plan reused"), std::string::npos) << what << ": not rebuilt: " << again.plan;
  };
  damage("flipped section bytes", [&] {
    // Three places in the packed weights (a byte of inter-section padding is not read, so more
    // than one).
    std::fstream f(plan, std::ios::in | std::ios::out | std::ios::binary);
    const auto size = static_cast<std::streamoff>(fs::file_size(plan));
    for (std::streamoff at : {size / 3, size / 2, 2 * size / 3}) {
      f.seekg(at);
      const char c = static_cast<char>(f.get());
      f.seekp(at);
      f.put(static_cast<char>(c ^ 0x5a));
    }
  });
  damage("truncated", [&] { fs::resize_file(plan, fs::file_size(plan) / 3); });
  damage("model rewritten", [&] {
    fs::last_write_time(model, fs::last_write_time(model) + std::chrono::seconds(10));
  });
  fs::remove_all(root);
}

}  // namespace
}  // namespace pagoda
