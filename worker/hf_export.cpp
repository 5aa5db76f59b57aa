// Hugging Face GPT-2 export (see hf_export.h). Our parameter names are nanoGPT's, grouped by layer
// (embed.wte, h3.attn.c_attn.weight, head.ln_f.bias); transformers' are transformer.wte.weight,
// transformer.h.3.attn.c_attn.weight, transformer.ln_f.bias.
#include "hf_export.h"

#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/format.h"
#include "safetensors.h"

namespace ds::ckpt {
namespace {

struct Param {
  std::vector<int64_t> shape;
  const float* values;
};

// [rows, cols] row-major -> [cols, rows].
std::vector<float> transposed(const Param& p) {
  const int64_t rows = p.shape[0], cols = p.shape[1];
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(c * rows + r)] = p.values[r * cols + c];
  return out;
}

}  // namespace

void export_hf_gpt2(const std::string& dir, const std::string& tag, const std::string& out) {
  const LoadedCheckpoint c = read_checkpoint(dir, tag);
  const std::string where = fmt::format("{}/{}", dir, tag);
  const nlohmann::json run = c.model.value("run", nlohmann::json::object());
  if (run.value("model", "") != "gpt")
    throw CheckpointError(fmt::format("{}: a checkpoint of the {} model; --format hf exports the gpt plugin's (GPT-2)",
                                      where, run.value("model", "unknown")));
  const std::vector<float>& master = c.state.tensors.at(0).second;
  std::map<std::string, Param> params;
  size_t offset = 0;
  for (const auto& p : c.model.at("params")) {
    Param param{p.at("shape").get<std::vector<int64_t>>(), master.data() + offset};
    int64_t n = 1;
    for (int64_t d : param.shape) n *= d;
    offset += static_cast<size_t>(n);
    params.emplace(p.at("name").get<std::string>(), param);
  }
  auto need = [&](const std::string& name) -> const Param& {
    auto it = params.find(name);
    if (it == params.end()) throw CheckpointError(fmt::format("{}: no parameter {} (not a gpt checkpoint?)", where, name));
    return it->second;
  };
  const Param& wte = need("embed.wte");
  const Param& wpe = need("embed.wpe");
  const int64_t vocab = wte.shape[0], n_embd = wte.shape[1], n_positions = wpe.shape[0];
  int64_t n_layer = 0;
  while (params.count(fmt::format("h{}.ln_1.weight", n_layer))) ++n_layer;
  const nlohmann::json model = run.value("model_config", nlohmann::json::object());
  const int64_t n_head = model.value("n_head", int64_t{4});  // the gpt plugin's default

  std::vector<SafetensorsTensor> tensors;
  auto copy = [&](const std::string& hf, const Param& p) {
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    tensors.push_back({hf, p.shape, std::vector<float>(p.values, p.values + n)});
  };
  auto transpose = [&](const std::string& hf, const Param& p) {
    tensors.push_back({hf, {p.shape[1], p.shape[0]}, transposed(p)});
  };
  copy("transformer.wte.weight", wte);
  copy("transformer.wpe.weight", wpe);
  for (int64_t i = 0; i < n_layer; ++i) {
    const std::string ours = fmt::format("h{}.", i), theirs = fmt::format("transformer.h.{}.", i);
    for (const char* name : {"ln_1.weight", "ln_1.bias", "attn.c_attn.bias", "attn.c_proj.bias", "ln_2.weight",
                             "ln_2.bias", "mlp.c_fc.bias", "mlp.c_proj.bias"})
      copy(theirs + name, need(ours + name));
    for (const char* name : {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"})
      transpose(theirs + name, need(ours + name));  // Linear [out, in] -> Conv1D [in, out]
  }
  copy("transformer.ln_f.weight", need("head.ln_f.weight"));
  copy("transformer.ln_f.bias", need("head.ln_f.bias"));
  if (tensors.size() != params.size())
    throw CheckpointError(fmt::format("{}: {} parameters, of which GPT-2 has {}", where, params.size(), tensors.size()));

  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) throw CheckpointError(fmt::format("{}: cannot create: {}", out, ec.message()));
  const nlohmann::ordered_json config = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"vocab_size", vocab},
      {"n_positions", n_positions},
      {"n_ctx", n_positions},
      {"n_embd", n_embd},
      {"n_layer", n_layer},
      {"n_head", n_head},
      {"n_inner", nullptr},
      {"activation_function", "gelu_new"},  // GELU's tanh form, as ours
      {"layer_norm_epsilon", 1e-5},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"initializer_range", model.value("init_std", 0.02)},
      {"scale_attn_weights", true},
      {"tie_word_embeddings", true},
      {"torch_dtype", "float32"}};
  write_text_atomically(out + "/config.json", config.dump(2) + "\n");
  write_safetensors(out + "/model.safetensors", tensors,
                    {{"format", "pt"}, {"source", "dsrun"}, {"tag", tag}, {"step", std::to_string(c.state.steps)}});
  std::printf("%s: GPT-2 (%lld layers, %lld heads, n_embd %lld, vocabulary %lld, context %lld) from %s\n", out.c_str(),
              static_cast<long long>(n_layer), static_cast<long long>(n_head), static_cast<long long>(n_embd),
              static_cast<long long>(vocab), static_cast<long long>(n_positions), where.c_str());
}

}  // namespace ds::ckpt
