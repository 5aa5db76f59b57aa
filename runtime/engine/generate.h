// Text generation with a trained language model: autoregressive sampling through Engine::predict,
// with temperature and top-k, for the `sample` block dsworker reads (README.md, "Sampling").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/rng.h"

namespace ds {

struct SampleConfig {
  std::vector<int32_t> prompt{'\n'};  // token ids the samples continue (a string is its bytes)
  int64_t length = 200;               // tokens generated per sample
  double temperature = 0.8;           // logits are divided by it; 0: always the most likely token
  int64_t top_k = 40;                 // draw among the k most likely tokens; 0: the whole vocabulary
  int64_t interval = 0;               // steps between samples during training; 0: after the last step only
  int64_t count = 1;                  // samples printed, at most one micro-batch
};

// The `sample` block: prompt (a string, byte-level models only, or a list of token ids), length,
// temperature, top_k, interval, count. Errors are ConfigErrors naming sample.<key> and the value.
SampleConfig parse_sample_config(const nlohmann::json& block);

// The next token from one position's logits [vocab]: argmax when temperature is 0, else a draw
// from softmax(logits / temperature) restricted to the top_k largest logits (ties kept in index order).
int32_t pick_token(const float* logits, int64_t vocab, double temperature, int64_t top_k, SplitMix64& rng);

// `count` continuations of the prompt, `length` tokens each (the prompt not included), one per row of
// a batch of `count` samples, drawn with `seed` (the same on every rank, so ranks agree). The model's input must
// be token ids [seq_len] and its predictions logits [seq_len, vocab]; the context is the last seq_len
// tokens. A collective at stage 3: every rank calls it.
std::vector<std::vector<int32_t>> generate(Engine& engine, const SampleConfig& config, uint64_t seed);

// Tokens as text: bytes for a byte-level vocabulary (control characters other than newline and
// tab as \xNN), else the ids in brackets.
std::string tokens_text(const std::vector<int32_t>& tokens, int64_t vocab);

}  // namespace ds
