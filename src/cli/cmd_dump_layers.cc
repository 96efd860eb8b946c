// `pagoda dump-layers`: runs one prompt and writes the residual stream after every layer, to
// find the first layer where the engine and a reference (tools/compare_layers.py runs
// transformers with output_hidden_states) diverge.
//   <out>/meta.json           {"layers": L, "tokens": T, "hidden": D, "ids": [...]}
//   <out>/layer_<i>.f32       [T, D] little-endian f32, after layer i (0-based)
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "model/model_loader.h"
#include "runtime/cpu_layer_ops.h"

namespace pagoda::cli {
namespace {

struct DumpOptions {
  std::string model;
  std::string ids;
  std::string out;
};

struct DumpContext {
  std::string dir;
  int64_t layers_written = 0;
};

void write_layer(DumpContext& c, int64_t layer, const Tensor& residual) {
  std::ofstream f(fmt::format("{}/layer_{}.f32", c.dir, layer), std::ios::binary);
  f.write(static_cast<const char*>(residual.data()), residual.nbytes());
  ++c.layers_written;
}

int run_dump(const DumpOptions& o) {
  std::vector<int32_t> ids;
  std::istringstream is(o.ids);
  for (int64_t v; is >> v;) ids.push_back(static_cast<int32_t>(v));
  if (ids.empty()) {
    std::cerr << "pagoda dump-layers: --ids needs at least one token id\n";
    return 2;
  }
  auto m = load_model(o.model);
  if (!m.ok()) {
    std::cerr << "pagoda dump-layers: " << m.status().to_string() << "\n";
    return 1;
  }
  for (int32_t t : ids)
    if (t < 0 || t >= m->config.vocab_size) {
      std::cerr << "pagoda dump-layers: token id " << t << " outside the vocabulary\n";
      return 2;
    }
  std::filesystem::create_directories(o.out);
  DumpContext ctx{o.out};
  ThreadPool pool(0);
  const int64_t bs = 16, nblocks = (static_cast<int64_t>(ids.size()) + bs - 1) / bs;
  KvCacheStorage kv(m->config, nblocks + 1, bs, DType::kF32);
  std::vector<int32_t> table;
  for (int64_t b = 0; b < nblocks; ++b) table.push_back(static_cast<int32_t>(b + 1));
  ForwardBatch batch;
  batch.add_sequence(ids, static_cast<int32_t>(ids.size()), table, bs, true, true);
  ForwardWorkspace ws;
  Tensor logits;
  cpu_forward(*m->model, batch, kv, ws, logits, pool,
              [&ctx](int64_t layer, const Tensor& residual) { write_layer(ctx, layer, residual); });
  std::ofstream(o.out + "/logits.f32", std::ios::binary).write(static_cast<const char*>(logits.data()), logits.nbytes());
  nlohmann::json meta = {{"layers", ctx.layers_written}, {"tokens", ids.size()}, {"hidden", m->config.hidden_size},
                         {"vocab", m->config.vocab_size}, {"ids", ids}, {"model", o.model}};
  std::ofstream(o.out + "/meta.json") << meta.dump(2) << "\n";
  std::cout << "wrote " << ctx.layers_written << " layers to " << o.out << "\n";
  return 0;
}

const CommandRegistration kDump("dump-layers", "Write the residual stream after every layer for one prompt (debugging)", [](CLI::App* app) {
  auto o = std::make_shared<DumpOptions>();
  app->add_option("--model,-m", o->model, "GGUF file or Hugging Face model directory")->required();
  app->add_option("--ids", o->ids, "Prompt token ids, space separated")->required();
  app->add_option("--out,-o", o->out, "Output directory")->required();
  return [o] { return run_dump(*o); };
});

}  // namespace
}  // namespace pagoda::cli
