// Text generation: token choice (greedy, temperature, top-k), the sample block's checks, and a tiny
// GPT trained on a periodic text continuing it exactly.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <map>
#include <string>

#include "comm/thread_ranks.h"
#include "config/ds_config.h"
#include "core/errors.h"
#include "data/token_dataset.h"
#include "engine/generate.h"
#include "engine_test_util.h"

namespace ds {
namespace {

std::string sample_error(const nlohmann::json& block) {
  try {
    parse_sample_config(block);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("generate: temperature 0 is argmax and ties go to the lower id") {
  SplitMix64 rng(1);
  const std::array<float, 5> logits{0.5f, 2.0f, -1.0f, 2.0f, 1.9f};
  CHECK(pick_token(logits.data(), 5, 0.0, 0, rng) == 1);
  CHECK(pick_token(logits.data(), 5, 1.0, 1, rng) == 1);  // top-1 leaves only the argmax
}

TEST_CASE("generate: draws follow softmax(logits / temperature) over the top k") {
  const std::array<float, 4> logits{1.0f, 3.0f, 0.0f, 2.0f};
  SplitMix64 rng(42);
  const int draws = 40000;
  std::map<int32_t, int> seen;
  for (int i = 0; i < draws; ++i) ++seen[pick_token(logits.data(), 4, 0.5, 2, rng)];
  CHECK(seen.size() == 2);  // only ids 1 and 3, the two largest logits
  const double p1 = 1.0 / (1.0 + std::exp((2.0 - 3.0) / 0.5));  // softmax over {3, 2} at temperature 0.5
  CHECK(static_cast<double>(seen[1]) / draws == doctest::Approx(p1).epsilon(0.02));
  seen.clear();
  for (int i = 0; i < draws; ++i) ++seen[pick_token(logits.data(), 4, 1.0, 0, rng)];
  CHECK(seen.size() == 4);
  const double z = std::exp(1.0) + std::exp(3.0) + std::exp(0.0) + std::exp(2.0);
  CHECK(static_cast<double>(seen[2]) / draws == doctest::Approx(1.0 / z).epsilon(0.15));  // the rarest, ~3%
}

TEST_CASE("generate: the sample block's defaults and errors") {
  const SampleConfig d = parse_sample_config(nlohmann::json::object());
  CHECK(d.prompt == std::vector<int32_t>{'\n'});
  CHECK(d.length == 200);
  CHECK(d.top_k == 40);
  CHECK(parse_sample_config({{"prompt", "Hi"}}).prompt == std::vector<int32_t>{'H', 'i'});
  CHECK(parse_sample_config({{"prompt", {50256, 3}}}).prompt == std::vector<int32_t>{50256, 3});
  CHECK(sample_error({{"lenght", 5}}) ==
        "sample.lenght: unknown key (sample takes prompt, length, temperature, top_k, interval and count)");
  CHECK(sample_error({{"prompt", ""}}) == "sample.prompt: empty (give at least one character or token id)");
  CHECK(sample_error({{"prompt", {1, -2}}}) == "sample.prompt: -2 is not a token id (an integer in [0, 65535])");
  CHECK(sample_error({{"temperature", -0.1}}) == "sample.temperature: -0.1 is not a number >= 0");
  CHECK(sample_error({{"length", 0}}) == "sample.length: 0 is not an integer >= 1");
  CHECK(sample_error({{"top_k", "all"}}) == "sample.top_k: 'all' is not an integer >= 0");
}

TEST_CASE("generate: byte tokens print as text with control characters escaped") {
  CHECK(tokens_text({'a', '\n', 'b', 0x07, '\t'}, 256) == "a\nb\\x07\t");
  CHECK(tokens_text({5, 700}, 1000) == "[5 700]");
}

// A GPT that has learnt "abcdefg" repeated continues any part of it greedily, on every rank alike
// (ZeRO-3 over two ranks: generation gathers each block on the spot).
TEST_CASE("generate: a GPT trained on a periodic text continues it") {
  const std::string period = "abcdefg";
  std::vector<uint16_t> tokens;
  for (int i = 0; i < 600; ++i) tokens.push_back(static_cast<unsigned char>(period[i % period.size()]));
  nlohmann::json cfg = {{"train_micro_batch_size_per_gpu", 4},
                        {"gradient_accumulation_steps", 1},
                        {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 0.01}, {"weight_decay", 0.0}}}}}};
  const DsConfig config = parse_config(cfg, "test", 2);
  const std::string model = R"({"n_layer": 1, "n_head": 2, "n_embd": 32, "seq_len": 16, "vocab_size": 256})";
  std::array<std::string, 2> greedy;
  run_ranks(2, [&](ProcessGroup& group) {
    TokenDataset data(tokens, 16, "train");
    auto plugin = Plugin::load(std::string(DS_TEST_PLUGIN_DIR) + "/libds_model_gpt.so", model);
    EngineConfig e;
    e.micro_batch = 4;
    e.zero_stage = 3;
    e.seed = 3;
    Engine engine(e, *plugin, group, [&](size_t n, NormReducer r) { return make_optimizer(config.optimizer, n, r); },
                  make_lr_schedule(config.scheduler, config.optimizer.lr), &data);
    for (int s = 0; s < 60; ++s) engine.step();
    SampleConfig sample;
    sample.prompt = {'c', 'd'};
    sample.length = 30;  // past seq_len: the context window slides
    sample.temperature = 0.0;
    greedy[static_cast<size_t>(group.rank())] = tokens_text(generate(engine, sample, 9)[0], 256);
  });
  CHECK(greedy[0] == "efgabcdefgabcdefgabcdefgabcdef");
  CHECK(greedy[1] == greedy[0]);
}

}  // namespace
}  // namespace ds
