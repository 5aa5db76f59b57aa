// ZeRO-Infinity: the optimizer state (and the fp32 master copy under 16-bit precision) in a swap
// file, stepped sub-group by sub-group, gives the in-memory run bit for bit at every stage, precision,
// buffer count and world size; memory holds only the buffers; checkpoints move between the two.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "engine_test_util.h"

using namespace ds;
using namespace ds::test;

namespace {

std::string swap_dir() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

// NVMe offload with sub-groups of 100 elements (several per rank for the 437-parameter mlp).
offload::SwapConfig nvme(size_t buffers) {
  offload::SwapConfig c;
  c.dir = swap_dir();
  c.sub_group = 100;
  c.buffer_count = buffers;
  c.aio.block_size = 4096;  // several pieces per sub-group
  return c;
}

std::function<void(EngineConfig&)> setup(amp::Storage precision, bool bf16_master, std::optional<offload::SwapConfig> swap) {
  return [=](EngineConfig& e) {
    e.precision = e.grad_storage = precision;
    if (precision == amp::Storage::F16) e.loss_scaling = amp::LossScalerConfig{};  // dynamic, DeepSpeed's defaults
    e.low_precision_master = bf16_master;
    e.nvme_offload = swap;
  };
}

}  // namespace

TEST_CASE("NVMe offload: every stage, precision, buffer count and world size gives the in-memory run bit for bit") {
  struct Case {
    amp::Storage precision;
    bool bf16_master;
    const char* name;
  };
  for (Case c : {Case{amp::Storage::F32, false, "fp32"}, Case{amp::Storage::BF16, false, "bf16"},
                 Case{amp::Storage::F16, false, "fp16"}, Case{amp::Storage::BF16, true, "bf16 master weights"}}) {
    for (int stage : {1, 2, 3}) {
      for (int world : {1, 2}) {
        CAPTURE(c.name);
        CAPTURE(stage);
        CAPTURE(world);
        RunSpec spec;
        spec.world = world;
        spec.stage = stage;
        spec.steps = 8;
        spec.clip = 1.0;
        spec.tweak = setup(c.precision, c.bf16_master, std::nullopt);
        const Run memory = run_training(spec);
        const size_t buffers = static_cast<size_t>(stage + world - 1);  // 1 to 4
        spec.tweak = setup(c.precision, c.bf16_master, nvme(buffers));
        const Run swapped = run_training(spec);
        for (size_t s = 0; s < memory.steps.size(); ++s) CHECK(swapped.steps[s].loss == memory.steps[s].loss);
        CHECK(swapped.params == memory.params);
      }
    }
  }
}

TEST_CASE("NVMe offload: SGD with momentum, Adagrad, RMSprop (three state buffers) and Lion too, and Lamb is refused") {
  RunSpec spec;
  spec.stage = 2;
  spec.world = 2;
  spec.steps = 6;
  for (const std::string& optimizer : {kSgd, kAdagrad, kRmspropFull, kLion}) {
    CAPTURE(optimizer);
    spec.optimizer = optimizer;
    spec.tweak = {};
    const Run memory = run_training(spec);
    spec.tweak = setup(amp::Storage::F32, false, nvme(3));
    CHECK(run_training(spec).params == memory.params);
  }
  spec.optimizer = kLamb;
  CHECK_THROWS_WITH_AS(run_training(spec), doctest::Contains("needs an element-wise optimizer (Adam, AdamW, Adagrad, RMSprop, SGD or Lion)"),
                       std::exception);  // run_ranks names the rank
}

TEST_CASE("NVMe offload: memory holds the buffers, the swap file the state") {
  const DsConfig config = parse_config({{"train_micro_batch_size_per_gpu", 4}, {"optimizer", nlohmann::json::parse(kAdam)}},
                                       "test", 1);
  for (amp::Storage precision : {amp::Storage::F32, amp::Storage::BF16}) {
    run_ranks(1, [&](ProcessGroup& group) {
      auto plugin = Plugin::load(plugin_path(), kModel);
      EngineConfig e;
      e.micro_batch = 4;
      e.zero_stage = 3;
      e.precision = e.grad_storage = precision;
      e.nvme_offload = nvme(2);
      Engine engine = make_engine(e, *plugin, group, config);
      engine.step();
      const MemoryReport m = engine.memory();
      const size_t p = engine.layout().partition_size();
      const size_t per_element = precision == amp::Storage::F32 ? 8 : 12;  // moments (+ the fp32 master)
      const size_t region = ((100 * 4 + 4095) / 4096 * 4096) * (per_element / 4);  // each stream 4 KiB-aligned
      CHECK(m.nvme == region * ((p + 99) / 100));
      CHECK(m.nvme >= per_element * p);
      CHECK(m.optimizer_state == 2 * region);  // two buffers, nothing else
      const auto stats = engine.swap_stats();
      REQUIRE(stats.has_value());
      CHECK(stats->bytes_read == m.nvme);           // one update read it all
      CHECK(stats->bytes_written == 2 * m.nvme);    // the initial state, and the update
    });
  }
}

TEST_CASE("NVMe offload: checkpoints move between the swap file and memory") {
  const DsConfig config = parse_config({{"train_micro_batch_size_per_gpu", 4}, {"optimizer", nlohmann::json::parse(kAdam)}},
                                       "test", 1);
  auto with_engine = [&](bool swapped, const std::function<void(Engine&)>& body) {
    run_ranks(1, [&](ProcessGroup& group) {
      auto plugin = Plugin::load(plugin_path(), kModel);
      EngineConfig e;
      e.micro_batch = 4;
      e.zero_stage = 2;
      e.precision = e.grad_storage = amp::Storage::BF16;
      if (swapped) e.nvme_offload = nvme(3);
      Engine engine = make_engine(e, *plugin, group, config);
      body(engine);
    });
  };
  check_checkpoints_cross(with_engine);
}

TEST_CASE("NVMe offload: a missing directory is a configuration error naming it") {
  RunSpec spec;
  spec.stage = 1;
  spec.steps = 1;
  offload::SwapConfig c = nvme(2);
  c.dir = swap_dir() + "/no-such-dir-for-dsworker";
  spec.tweak = setup(amp::Storage::F32, false, c);
  CHECK_THROWS_WITH_AS(run_training(spec),
                       doctest::Contains(("zero_optimization.offload_optimizer.nvme_path (rank 0): \"" + c.dir +
                                          "\": No such file or directory").c_str()),
                       std::exception);
}
