// Hugging Face GPT-2 out of a checkpoint of the `gpt` plugin (dsckpt export --format hf): a folder
// that transformers' GPT2LMHeadModel.from_pretrained loads — config.json (model_type gpt2, the sizes,
// GELU's tanh form "gelu_new", LayerNorm eps 1e-5, tied embeddings) and model.safetensors with
// transformers' names and layouts (its Conv1D weights are [in, out]: ours transposed; the LM head is
// the token embedding, stored once).
#pragma once
#include <string>

namespace ds::ckpt {

// Reads DIR/<tag> and writes OUT/config.json and OUT/model.safetensors. Throws CheckpointError for a
// checkpoint of another model or with unexpected parameters, naming the checkpoint.
void export_hf_gpt2(const std::string& dir, const std::string& tag, const std::string& out);

}  // namespace ds::ckpt
