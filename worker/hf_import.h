// Hugging Face GPT-2 in (the `gpt` model's `init_from` key): a folder with config.json and
// model.safetensors, as transformers' save_pretrained or `dsckpt export --format hf` writes it,
// becomes the engine's initial weights, at any ZeRO stage and world size. The inverse of hf_export.h:
// export then import gives bit-identical weights.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine.h"

namespace ds {

// Loads FOLDER into `engine` (fresh optimizer state, step 0; every rank calls it: a collective at
// stage 3). `model` is the config's model block (its sizes are checked against config.json: any
// difference is a ConfigError naming both values); a context longer than seq_len keeps its first
// seq_len positions. Returns a line describing what was loaded.
std::string init_from_hf_gpt2(Engine& engine, const std::string& folder, const nlohmann::json& model);

}  // namespace ds
