// Autoregressive sampling through Engine::predict (see generate.h).
#include "engine/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "core/errors.h"

namespace ds {
namespace {

std::string show(const nlohmann::json& value) {
  return value.is_string() ? fmt::format("'{}'", value.get<std::string>()) : value.dump();
}

int64_t integer(const nlohmann::json& block, const char* key, int64_t fallback, int64_t least) {
  auto it = block.find(key);
  if (it == block.end()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < least)
    throw ConfigError(fmt::format("sample.{}: {} is not an integer >= {}", key, show(*it), least));
  return it->get<int64_t>();
}

std::vector<int32_t> parse_prompt(const nlohmann::json& value) {
  std::vector<int32_t> prompt;
  if (value.is_string()) {
    for (unsigned char c : value.get<std::string>()) prompt.push_back(c);
  } else if (value.is_array()) {
    for (const auto& id : value) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > 65535)
        throw ConfigError(fmt::format("sample.prompt: {} is not a token id (an integer in [0, 65535])", show(id)));
      prompt.push_back(id.get<int32_t>());
    }
  } else {
    throw ConfigError(fmt::format("sample.prompt: {} is not a string or a list of token ids", show(value)));
  }
  if (prompt.empty()) throw ConfigError("sample.prompt: empty (give at least one character or token id)");
  return prompt;
}

}  // namespace

SampleConfig parse_sample_config(const nlohmann::json& block) {
  if (!block.is_object()) throw ConfigError(fmt::format("sample: {} is not an object", show(block)));
  static const char* const keys[] = {"prompt", "length", "temperature", "top_k", "interval", "count"};
  for (const auto& [key, value] : block.items())
    if (std::find(std::begin(keys), std::end(keys), key) == std::end(keys))
      throw ConfigError(fmt::format(
          "sample.{}: unknown key (sample takes prompt, length, temperature, top_k, interval and count)", key));
  SampleConfig c;
  if (auto it = block.find("prompt"); it != block.end()) c.prompt = parse_prompt(*it);
  c.length = integer(block, "length", c.length, 1);
  c.top_k = integer(block, "top_k", c.top_k, 0);
  c.interval = integer(block, "interval", c.interval, 0);
  c.count = integer(block, "count", c.count, 1);
  if (auto it = block.find("temperature"); it != block.end()) {
    if (!it->is_number() || !(it->get<double>() >= 0.0))
      throw ConfigError(fmt::format("sample.temperature: {} is not a number >= 0", show(*it)));
    c.temperature = it->get<double>();
  }
  return c;
}

int32_t pick_token(const float* logits, int64_t vocab, double temperature, int64_t top_k, SplitMix64& rng) {
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  auto larger = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  if (temperature == 0.0) return *std::min_element(order.begin(), order.end(), larger);
  const size_t k = top_k > 0 ? static_cast<size_t>(std::min(top_k, vocab)) : order.size();
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(), larger);
  order.resize(k);
  std::vector<double> weight(k);
  const double top = logits[order[0]];
  for (size_t i = 0; i < k; ++i) weight[i] = std::exp((logits[order[i]] - top) / temperature);
  double draw = rng.uniform() * std::accumulate(weight.begin(), weight.end(), 0.0);
  for (size_t i = 0; i < k; ++i) {
    draw -= weight[i];
    if (draw < 0.0) return order[i];
  }
  return order[k - 1];
}

std::vector<std::vector<int32_t>> generate(Engine& engine, const SampleConfig& config, uint64_t seed) {
  const ds_dataset_info& info = engine.data_info();
  const ds_shape logits = engine.predictions_shape();
  if (info.input_dtype != DS_I32 || info.input_shape.ndim != 1 || logits.ndim != 3)
    throw ConfigError("sample: the model is not a language model (its input must be token ids [seq_len] and its "
                      "predictions logits [seq_len, vocab]); remove the sample block");
  const int64_t rows = config.count, seq_len = info.input_shape.dims[0], vocab = logits.dims[2];
  if (rows > engine.micro_batch())
    throw ConfigError(fmt::format("sample.count: {} is more than one micro-batch ({} samples)", rows,
                                  engine.micro_batch()));
  for (int32_t id : config.prompt)
    if (id >= vocab) throw ConfigError(fmt::format("sample.prompt: token id {} is not below the vocabulary size {}", id, vocab));

  std::vector<std::vector<int32_t>> text(static_cast<size_t>(config.count), config.prompt);
  std::vector<SplitMix64> rng;
  for (int64_t r = 0; r < config.count; ++r) rng.emplace_back(mix_seed(seed, static_cast<uint64_t>(r)));
  std::vector<int32_t> input(static_cast<size_t>(rows * seq_len), 0);
  ds_tensor batch{input.data(), DS_I32, ds_shape{2, {rows, seq_len}}, DS_DEVICE_CPU};
  for (int64_t t = 0; t < config.length; ++t) {
    const size_t window = std::min(text[0].size(), static_cast<size_t>(seq_len));  // all rows are as long
    for (size_t r = 0; r < text.size(); ++r)
      std::copy(text[r].end() - static_cast<std::ptrdiff_t>(window), text[r].end(),
                input.begin() + static_cast<std::ptrdiff_t>(r * static_cast<size_t>(seq_len)));
    const std::vector<float> out = engine.predict(batch);  // causal: positions after the window do not matter
    for (size_t r = 0; r < text.size(); ++r) {
      const float* last = out.data() + (r * static_cast<size_t>(seq_len) + window - 1) * static_cast<size_t>(vocab);
      text[r].push_back(pick_token(last, vocab, config.temperature, config.top_k, rng[r]));
    }
  }
  for (auto& t : text) t.erase(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(config.prompt.size()));
  return text;
}

std::string tokens_text(const std::vector<int32_t>& tokens, int64_t vocab) {
  std::string out;
  if (vocab != 256) {
    for (int32_t id : tokens) out += fmt::format("{}{}", out.empty() ? "[" : " ", id);
    return out + "]";
  }
  for (int32_t id : tokens) {
    const auto c = static_cast<unsigned char>(id);
    if (c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f))
      out += static_cast<char>(c);
    else
      out += fmt::format("\\x{:02x}", c);
  }
  return out;
}

}  // namespace ds
