// The batch triad: train_batch_size = micro × gas × world_size, resolved with DeepSpeed's integer
// rules for every combination of given keys, at world sizes 1, 2 and 4.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "config_test_util.h"

using ds::test::error_of;
using ds::test::parse;

namespace {

void check_triad(const ds::DsConfig& c, int64_t train, int64_t micro, int64_t gas) {
  CHECK(c.train_batch_size == train);
  CHECK(c.train_micro_batch_size_per_gpu == micro);
  CHECK(c.gradient_accumulation_steps == gas);
}

}  // namespace

TEST_CASE("triad: all three consistent") {
  for (int ws : {1, 2, 4}) {
    CAPTURE(ws);
    int gas = 8 / ws;  // 32 = 4 × gas × ws
    check_triad(parse(fmt::format(R"({{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
                                        "gradient_accumulation_steps": {}}})", gas), ws),
                32, 4, gas);
  }
}

TEST_CASE("triad: all three inconsistent") {
  CHECK(error_of(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})") ==
        "ds_config.json: train_batch_size: 32 != train_micro_batch_size_per_gpu 4 * gradient_accumulation_steps 2 "
        "* world_size 1 = 8");
  // Consistent at world size 2 (4 × 4 × 2) but not at 4.
  std::string text = R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4})";
  check_triad(parse(text, 2), 32, 4, 4);
  CHECK(error_of(text, 4) ==
        "ds_config.json: train_batch_size: 32 != train_micro_batch_size_per_gpu 4 * gradient_accumulation_steps 4 "
        "* world_size 4 = 64");
}

TEST_CASE("triad: train and micro give gas") {
  // gas = (32 // 4) // ws = 8, 4, 2
  for (int ws : {1, 2, 4}) {
    CAPTURE(ws);
    check_triad(parse(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})", ws), 32, 4, 8 / ws);
  }
  // ws 2: gas = (33 // 4) // 2 = 4, and 4 × 4 × 2 = 32 != 33.
  CHECK(error_of(R"({"train_batch_size": 33, "train_micro_batch_size_per_gpu": 4})", 2) ==
        "ds_config.json: train_batch_size: 33 != train_micro_batch_size_per_gpu 4 * gradient_accumulation_steps 4 "
        "* world_size 2 = 32 (gradient_accumulation_steps derived as 33 // 4 // world_size 2)");
  // The reference's example: ws 2, train 33, micro 17 → gas = (33 // 17) // 2 = 0.
  CHECK(error_of(R"({"train_batch_size": 33, "train_micro_batch_size_per_gpu": 17})", 2) ==
        "ds_config.json: gradient_accumulation_steps: 0 must be > 0 "
        "(gradient_accumulation_steps derived as 33 // 17 // world_size 2)");
}

TEST_CASE("triad: train and gas give micro") {
  // micro = (32 // ws) // 2 = 16, 8, 4
  for (int ws : {1, 2, 4}) {
    CAPTURE(ws);
    check_triad(parse(R"({"train_batch_size": 32, "gradient_accumulation_steps": 2})", ws), 32, 16 / ws, 2);
  }
  // ws 4: micro = (30 // 4) // 4 = 1, and 1 × 4 × 4 = 16 != 30.
  CHECK(error_of(R"({"train_batch_size": 30, "gradient_accumulation_steps": 4})", 4) ==
        "ds_config.json: train_batch_size: 30 != train_micro_batch_size_per_gpu 1 * gradient_accumulation_steps 4 "
        "* world_size 4 = 16 (train_micro_batch_size_per_gpu derived as 30 // world_size 4 // 4)");
  // ws 2: micro = (6 // 2) // 4 = 0.
  CHECK(error_of(R"({"train_batch_size": 6, "gradient_accumulation_steps": 4})", 2) ==
        "ds_config.json: train_micro_batch_size_per_gpu: 0 must be > 0 "
        "(train_micro_batch_size_per_gpu derived as 6 // world_size 2 // 4)");
}

TEST_CASE("triad: micro and gas give train") {
  // train = 4 × 2 × ws = 8, 16, 32
  for (int ws : {1, 2, 4}) {
    CAPTURE(ws);
    check_triad(parse(R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})", ws), 8 * ws, 4,
                2);
  }
}

TEST_CASE("triad: train only") {
  // gas = 1, micro = 32 // ws = 32, 16, 8
  for (int ws : {1, 2, 4}) {
    CAPTURE(ws);
    check_triad(parse(R"({"train_batch_size": 32})", ws), 32, 32 / ws, 1);
  }
  // ws 4: micro = 30 // 4 = 7, and 7 × 1 × 4 = 28 != 30.
  CHECK(error_of(R"({"train_batch_size": 30})", 4) ==
        "ds_config.json: train_batch_size: 30 != train_micro_batch_size_per_gpu 7 * gradient_accumulation_steps 1 "
        "* world_size 4 = 28 (gradient_accumulation_steps derived as 1 and train_micro_batch_size_per_gpu as "
        "30 // world_size 4)");
  CHECK(error_of(R"({"train_batch_size": 2})", 4) ==
        "ds_config.json: train_micro_batch_size_per_gpu: 0 must be > 0 (gradient_accumulation_steps derived as 1 "
        "and train_micro_batch_size_per_gpu as 2 // world_size 4)");
}

TEST_CASE("triad: micro only") {
  // gas = 1, train = 4 × ws
  for (int ws : {1, 2, 4}) {
    CAPTURE(ws);
    check_triad(parse(R"({"train_micro_batch_size_per_gpu": 4})", ws), 4 * ws, 4, 1);
  }
}

TEST_CASE("triad: gas only is the DeepSpeed error; nothing at all is the Hugging Face Trainer's defaults") {
  const std::string expected =
      "ds_config.json: either train_batch_size or train_micro_batch_size_per_gpu must be given";
  for (int ws : {1, 2, 4}) {
    CAPTURE(ws);
    CHECK(error_of(R"({"gradient_accumulation_steps": 4})", ws) == expected);
    check_triad(parse("{}", ws), 8 * ws, 8, 1);  // per-device batch 8, accumulation 1
    check_triad(parse(R"({"train_batch_size": null})", ws), 8 * ws, 8, 1);  // null = not given
  }
}

TEST_CASE("triad: given values must be positive") {
  CHECK(error_of(R"({"train_batch_size": 0})") == "ds_config.json: train_batch_size: 0 must be > 0");
  CHECK(error_of(R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 0})") ==
        "ds_config.json: train_micro_batch_size_per_gpu: 0 must be > 0");
  CHECK(error_of(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": -1})") ==
        "ds_config.json: gradient_accumulation_steps: -1 must be > 0");
}

TEST_CASE("triad: values must be integers") {
  CHECK(error_of(R"({"train_batch_size": 8.5})") == "ds_config.json: train_batch_size: 8.5 is not an integer");
  check_triad(parse(R"({"train_batch_size": "auto"})"), 8, 8, 1);  // the Hugging Face Trainer's (auto_values.cpp)
  check_triad(parse(R"({"train_batch_size": 32.0})"), 32, 32, 1);  // an integral float is an integer
}

TEST_CASE("triad: world size is recorded") {
  auto c = parse(R"({"train_micro_batch_size_per_gpu": 2})", 4);
  CHECK(c.world_size == 4);
  CHECK_THROWS_AS(parse(R"({"train_micro_batch_size_per_gpu": 2})", 0), std::invalid_argument);
}
