// Hugging Face GPT-2 in (see hf_import.h): transformers' names and Conv1D layouts back to the gpt
// plugin's (hf_export.cpp has the mapping the other way).
#include "hf_import.h"

#include <fstream>

#include <fmt/format.h>

#include "core/errors.h"
#include "safetensors.h"

namespace ds {
namespace {

// transformers' name for one of our parameters, and whether its layout is transposed (Conv1D).
std::pair<std::string, bool> hf_name(const std::string& ours) {
  if (ours == "embed.wte") return {"transformer.wte.weight", false};
  if (ours == "embed.wpe") return {"transformer.wpe.weight", false};
  if (ours.rfind("head.", 0) == 0) return {"transformer." + ours.substr(5), false};  // head.ln_f.*
  const size_t dot = ours.find('.');                                              // h<i>.<param>
  const std::string param = ours.substr(dot + 1);
  const bool conv1d = param == "attn.c_attn.weight" || param == "attn.c_proj.weight" || param == "mlp.c_fc.weight" ||
                      param == "mlp.c_proj.weight";
  return {fmt::format("transformer.h.{}.{}", ours.substr(1, dot - 1), param), conv1d};
}

}  // namespace

std::string init_from_hf_gpt2(Engine& engine, const std::string& folder, const nlohmann::json& model) {
  const std::string where = "model.init_from: " + folder;
  std::ifstream config_file(folder + "/config.json");
  if (!config_file) throw ConfigError(fmt::format("{}/config.json: cannot read", where));
  nlohmann::json hf;
  try {
    hf = nlohmann::json::parse(config_file);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("{}/config.json: {}", where, e.what()));
  }
  auto check = [&](const char* theirs, const nlohmann::json& expected, const std::string& ours) {
    const nlohmann::json got = hf.value(theirs, nlohmann::json());
    if (got != expected)
      throw ConfigError(fmt::format("{}/config.json: {} is {}, but {} is {}", where, theirs, got.dump(), ours,
                                    expected.dump()));
  };
  check("model_type", "gpt2", "the gpt plugin's model type");
  const std::string activation = hf.value("activation_function", "gelu_new");
  if (activation != "gelu_new" && activation != "gelu_pytorch_tanh")
    throw ConfigError(fmt::format("{}/config.json: activation_function \"{}\": the gpt plugin's GELU is the tanh form "
                                  "(gelu_new)", where, activation));
  if (hf.value("layer_norm_epsilon", 1e-5) != 1e-5)
    throw ConfigError(fmt::format("{}/config.json: layer_norm_epsilon {}: the gpt plugin's is 1e-5", where,
                                  hf["layer_norm_epsilon"].dump()));
  if (!hf.value("tie_word_embeddings", true))
    throw ConfigError(fmt::format("{}/config.json: tie_word_embeddings false: the gpt plugin ties its LM head", where));
  check("n_head", model.value("n_head", 4), "model.n_head");  // 4: the gpt plugin's default

  const auto tensors = read_safetensors(folder + "/model.safetensors");
  std::vector<float> weights;  // every non-tied parameter of the model in order: the checkpoints' flat order
  weights.reserve(engine.model_parameters());
  int64_t positions = 0, seq_len = 0;
  for (const ModelTensor& slot : engine.model_tensors()) {  // the head's tied copy of embed.wte is not listed
    const auto [name, conv1d] = hf_name(slot.name);
    const auto it = tensors.find(name);
    if (it == tensors.end())
      throw ConfigError(fmt::format("{}/model.safetensors: no {} (for the gpt plugin's {})", where, name, slot.name));
    const SafetensorsTensor& t = it->second;
    std::vector<int64_t> want(slot.shape.dims, slot.shape.dims + slot.shape.ndim);
    if (conv1d) std::swap(want[0], want[1]);
    std::vector<int64_t> got = t.shape;
    if (slot.name == "embed.wpe" && got.size() == 2 && got[0] > want[0]) {
      positions = got[0];
      seq_len = want[0];
      got[0] = want[0];  // a longer context than seq_len: its first seq_len positions
    }
    if (got != want)
      throw ConfigError(fmt::format("{}/model.safetensors: {} is {}, but the gpt plugin's {} needs {} (model block: {})",
                                    where, name, nlohmann::json(t.shape).dump(), slot.name,
                                    nlohmann::json(want).dump(), model.dump()));
    if (conv1d) {  // [in, out] -> [out, in]
      const int64_t in = want[0], out = want[1];
      for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i) weights.push_back(t.values[static_cast<size_t>(i * out + o)]);
    } else {
      weights.insert(weights.end(), t.values.begin(), t.values.begin() + static_cast<std::ptrdiff_t>(shape_numel(slot.shape)));
    }
  }
  if (auto head = tensors.find("lm_head.weight"); head != tensors.end()) {
    const auto wte = tensors.find("transformer.wte.weight");
    if (wte != tensors.end() && head->second.values != wte->second.values)
      throw ConfigError(fmt::format("{}/model.safetensors: lm_head.weight differs from transformer.wte.weight; the gpt "
                                    "plugin ties its LM head", where));
  }

  TrainingState state = engine.checkpoint_shard();  // a fresh optimizer's state names, scalars and scaler
  for (auto& [name, values] : state.tensors) values.assign(engine.model_parameters(), 0.0f);
  state.tensors.at(0).second = std::move(weights);  // "master"
  state.steps = state.updates = 0;
  engine.restore(state);
  return fmt::format("initialised from {} ({} parameters{})", folder, engine.model_parameters(),
                     positions ? fmt::format("; its first {} of {} positions", seq_len, positions)
                               : "");
}

}  // namespace ds
