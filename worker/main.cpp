// dsworker: one training rank. Reads the rank environment dsrun sets (or runs alone as rank 0 of
// 1 without it), the ds_config file and the model plugin; meets the other ranks through the
// rendezvous store; builds the Gloo process group and the engine; trains; reports progress.
// Exit status: 0, 2 for a bad config or flag, 1 for anything else (plugin, communication).
#include <malloc.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "comm/process_group.h"
#include "comm/rendezvous.h"
#include "comm/store.h"
#include "config/ds_config.h"
#include "core/errors.h"
#include "cpu/blas.h"
#include "cpu/parallel.h"
#include "engine/engine.h"
#include "checkpoint/checkpoint.h"
#include "data_source.h"
#include "engine/generate.h"
#include "metrics.h"
#include "report.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "plugin/plugin.h"

namespace ds {
namespace {

struct WorkerOptions {
  std::string model, config, metrics;
  std::string resume = "auto";  // auto: from checkpoint.dir's latest when there is one; never; or a tag
  std::optional<int64_t> steps, epochs;
  std::optional<uint64_t> seed;
  bool print_config = false;
};

// Features of ds_config that parse but are not implemented yet are refused, never ignored.
void refuse_unimplemented(const DsConfig& c, const std::string& origin) {
  if (c.communication_data_type != c.grad_accum_dtype)
    throw ConfigError(fmt::format("{}: communication_data_type: {}: gradients are reduced in the type they accumulate in "
                                  "(data_types.grad_accum_dtype, here {}); another type is not implemented",
                                  origin, dtype_name(c.communication_data_type), dtype_name(c.grad_accum_dtype)));
  const ZeroConfig& z = c.zero_optimization;
  auto refuse = [&](const char* key, const std::string& value, const char* what) {
    throw ConfigError(fmt::format("{}: zero_optimization.{}: {}: {} is not implemented yet", origin, key, value, what));
  };
  if (z.offload_optimizer && z.offload_optimizer->device != OffloadDevice::none)
    refuse("offload_optimizer.device", "not none", "ZeRO-Offload");
  if (z.offload_param && z.offload_param->device != OffloadDevice::none)
    refuse("offload_param.device", "not none", "ZeRO-Offload");
  if (z.zero_hpz_partition_size > 1)
    refuse("zero_hpz_partition_size", std::to_string(z.zero_hpz_partition_size), "ZeRO++ hierarchical partitioning");
  if (z.zero_quantized_weights || z.zero_quantized_nontrainable_weights || z.zero_quantized_gradients)
    refuse("zero_quantized_*", "true", "ZeRO++ quantized communication");
  if (z.mics_shard_size > 0) refuse("mics_shard_size", std::to_string(z.mics_shard_size), "MiCS sharding");
  const ActivationCheckpointingConfig& ac = c.activation_checkpointing;
  if (ac.partition_activations || ac.cpu_checkpointing)
    throw ConfigError(fmt::format("{}: activation_checkpointing.{}: true is not implemented yet", origin,
                                  ac.partition_activations ? "partition_activations" : "cpu_checkpointing"));
}

amp::Storage storage_of(Dtype d) {
  return d == Dtype::fp16 ? amp::Storage::F16 : d == Dtype::bf16 ? amp::Storage::BF16 : amp::Storage::F32;
}

// DeepSpeed's ZeRO scaler with the documented defaults, whichever fp16 keys are written.
amp::LossScalerConfig loss_scaler_config(const Fp16Config& f) {
  amp::LossScalerConfig s;
  s.dynamic = f.loss_scale == 0.0;
  s.initial_scale = s.dynamic ? std::ldexp(1.0, static_cast<int>(f.initial_scale_power)) : f.loss_scale;
  s.window = f.loss_scale_window;
  s.min_scale = f.min_loss_scale;
  s.hysteresis = f.hysteresis;
  s.consecutive_hysteresis = f.consecutive_hysteresis;
  return s;
}

EngineConfig engine_config(const DsConfig& c, uint64_t seed) {
  EngineConfig e;
  e.micro_batch = c.train_micro_batch_size_per_gpu;
  e.grad_accum = c.gradient_accumulation_steps;
  e.gradient_clipping = c.gradient_clipping;
  e.zero_stage = static_cast<int>(c.zero_optimization.stage);
  e.reduce_bucket_elems = c.zero_optimization.reduce_bucket_size;
  e.allgather_bucket_elems = c.zero_optimization.allgather_bucket_size;
  e.overlap_comm = c.zero_optimization.overlap_comm;
  e.stage3.prefetch_elems = c.zero_optimization.prefetch_bucket_size;
  e.stage3.max_live_elems = c.zero_optimization.max_live_parameters;
  e.stage3.persistence = c.zero_optimization.param_persistence_threshold;
  e.stage3.model_persistence = c.zero_optimization.model_persistence_threshold;
  e.prescale_gradients = c.prescale_gradients;
  e.predivide_factor = c.gradient_predivide_factor;
  e.precision = storage_of(c.model_dtype());
  e.grad_storage = storage_of(c.grad_accum_dtype);
  if (c.fp16.enabled) e.loss_scaling = loss_scaler_config(c.fp16);
  e.cast_inputs = c.fp16.enabled && c.fp16.auto_cast;
  e.recompute = c.activation_checkpointing.present;
  e.seed = seed;
  return e;
}

int world_size_from_env() {
  const char* text = std::getenv("WORLD_SIZE");
  if (!text || !*text) return 1;
  char* end = nullptr;
  long n = std::strtol(text, &end, 10);
  if (*end != '\0' || n < 1 || n > (1 << 24))
    throw ConfigError(fmt::format("WORLD_SIZE='{}' is not a positive integer (from the environment)", text));
  return static_cast<int>(n);
}

// OMP_NUM_THREADS if set (dsrun --bind_cores_to_rank sets it), else this host's CPUs shared among its ranks.
int kernel_threads_for() {
  if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp && std::atoi(omp) > 0) return std::atoi(omp);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  int available = ::sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  const char* local = std::getenv("LOCAL_SIZE");
  int local_size = local && std::atoi(local) > 0 ? std::atoi(local) : 1;
  return std::max(1, available / local_size);
}

int train(const WorkerOptions& o) {
  if (o.print_config) {  // connects to nothing: only WORLD_SIZE matters (for the batch triad)
    std::cout << resolved_json(load_config(o.config, world_size_from_env())).dump(2) << "\n";
    return 0;
  }
  const JobEnv env = read_job_env();
  const DsConfig config = load_config(o.config, env.world_size);
  refuse_unimplemented(config, o.config);
  if (o.model.empty()) throw ConfigError("--model is required (a built-in name such as mlp, or a plugin .so path)");
  const bool lead = env.rank == 0;
  cpu::set_threads(kernel_threads_for());
  for (const auto& warning : config.warnings)
    if (lead) std::fprintf(stderr, "dsworker: warning: %s\n", warning.c_str());

  auto plugin = Plugin::load(o.model, config.model.dump());
  std::shared_ptr<Store> store;
  std::unique_ptr<TcpStoreServer> server;
  if (env.world_size == 1) {
    store = make_memory_store();
  } else {
    if (lead) server = serve_tcp_store(env.master_port, env.token);
    store = connect_tcp_store(env.master_addr, env.master_port, env.token, std::chrono::seconds(60));
    rendezvous(*store, env.rank, env.world_size, std::chrono::seconds(60));
  }
  auto group = make_gloo_group(store, env.rank, env.world_size, "dp", std::chrono::seconds(300));

  TrainingData data = load_training_data(config, *plugin);
  const uint64_t seed = o.seed.value_or(config.seed);
  Engine engine(engine_config(config, seed), *plugin, *group,
                [&](size_t n, NormReducer reducer) { return make_optimizer(config.optimizer, n, reducer); },
                make_lr_schedule(config.scheduler, config.optimizer.lr), data.train.get());
  std::optional<SampleConfig> sample;
  if (!config.sample.empty()) {
    sample = parse_sample_config(config.sample);
    if (data.vocab == 0)
      throw ConfigError(fmt::format("sample: the model {} is not a language model; remove the sample block",
                                    plugin->name()));
  }
  const CheckpointConfig& checkpoint = config.checkpoint;
  std::optional<std::string> resume_tag;
  if (o.resume != "never") {
    if (checkpoint.dir.empty() && o.resume != "auto")
      throw ConfigError(fmt::format("--resume {}: the config has no checkpoint.dir to load it from", o.resume));
    if (!checkpoint.dir.empty()) resume_tag = o.resume == "auto" ? ckpt::latest_tag(checkpoint.dir) : o.resume;
  }
  if (resume_tag) {
    ckpt::load_checkpoint(engine, checkpoint.dir, *resume_tag);
    if (lead)
      std::fprintf(stderr, "dsworker: resumed from %s/%s: step %lld\n", checkpoint.dir.c_str(), resume_tag->c_str(),
                   static_cast<long long>(engine.steps_taken()));
  }
  const nlohmann::json run_info = {{"model", plugin->name()}, {"model_config", config.model}};
  auto save = [&] {
    const std::string tag = ckpt::save_checkpoint(engine, *group, checkpoint.dir, checkpoint.keep_last, run_info);
    if (lead) std::printf("step %lld: saved checkpoint %s/%s\n", static_cast<long long>(engine.steps_taken()),
                          checkpoint.dir.c_str(), tag.c_str());
  };
  const int64_t steps = o.steps ? *o.steps : o.epochs.value_or(1) * engine.steps_per_epoch();
  const int64_t tokens_per_step = engine.global_batch() * data.tokens_per_sample;
  if (lead) {
    MemoryReport m = engine.memory();
    std::fprintf(stderr,
                 "dsworker: model %s: %zu parameters in %d layers; world size %d, ZeRO stage %d, %s (gradients %s), "
                 "global batch %lld "
                 "(micro %lld x accumulation %lld x ranks %d); %lld steps (%lld per epoch)\n",
                 plugin->name().c_str(), engine.num_parameters(), plugin->num_layers(), env.world_size,
                 static_cast<int>(config.zero_optimization.stage), std::string(dtype_name(config.model_dtype())).c_str(),
                 std::string(dtype_name(config.grad_accum_dtype)).c_str(), static_cast<long long>(engine.global_batch()),
                 static_cast<long long>(config.train_micro_batch_size_per_gpu),
                 static_cast<long long>(config.gradient_accumulation_steps), env.world_size,
                 static_cast<long long>(steps), static_cast<long long>(engine.steps_per_epoch()));
    if (!data.description.empty())
      std::fprintf(stderr, "dsworker: data: %s; %lld tokens per step\n", data.description.c_str(),
                   static_cast<long long>(tokens_per_step));
    std::fprintf(stderr, "dsworker: memory per rank at start: %s\n", memory_line(m).c_str());
  }
  std::map<std::string, uint64_t> sent_before;
  for (const char* op : {"allreduce", "reduce_scatter", "allgather", "broadcast"})
    sent_before[op] = group->comms().stats(op).sent_bytes;

  std::optional<MetricsWriter> metrics;
  if (lead) {
    std::string csv_dir;
    if (config.csv_monitor.enabled) csv_dir = config.csv_monitor.output_path + "/" + config.csv_monitor.job_name;
    metrics.emplace(o.metrics, csv_dir, data.tokens_per_sample, /*append=*/resume_tag.has_value());
  }
  // Every rank evaluates and samples (collectives at stage 3); rank 0 reports.
  std::optional<double> val_loss;
  auto validate = [&](int64_t step) {
    val_loss = engine.evaluate(*data.val, data.eval.max_samples);
    if (!lead) return;
    metrics->write_validation(step, step * engine.global_batch(), *val_loss);
    std::printf("step %lld: validation loss %.4f\n", static_cast<long long>(step), *val_loss);
  };
  auto print_sample = [&](int64_t step) {
    const auto texts = generate(engine, *sample, mix_seed(seed, static_cast<uint64_t>(step)));
    if (!lead) return;
    std::printf("sample after step %lld (temperature %g, top_k %lld):\n", static_cast<long long>(step),
                sample->temperature, static_cast<long long>(sample->top_k));
    for (const auto& text : texts)
      std::printf("%s%s\n----\n", tokens_text(sample->prompt, data.vocab).c_str(), tokens_text(text, data.vocab).c_str());
  };
  const int64_t every = config.steps_per_print.value_or(10);
  double total_seconds = 0.0, first_loss = 0.0, last_loss = 0.0, interval_seconds = 0.0;
  int64_t interval_samples = 0;
  const int64_t first_step = engine.steps_taken();
  for (int64_t s = first_step; s < steps; ++s) {
    StepStats stats = engine.step();
    total_seconds += stats.seconds;
    interval_seconds += stats.seconds;
    interval_samples += stats.samples;
    if (s == first_step) first_loss = stats.loss;
    last_loss = stats.loss;
    if (lead) {
      metrics->write(stats, stats.step * engine.global_batch());
      if (stats.skipped)
        std::printf("step %lld: overflow, skipping; loss scale %s -> %s\n", static_cast<long long>(stats.step),
                    fmt::format("{}", stats.loss_scale).c_str(), fmt::format("{}", engine.loss_scale()).c_str());
      if (every > 0 && (stats.step % every == 0 || stats.step == steps)) {
        Progress p{stats.step, steps, total_seconds, 0.0, data.tokens_per_sample > 0 ? "tokens" : "samples"};
        p.rate = interval_seconds > 0 ? static_cast<double>(interval_samples) / interval_seconds *
                                            static_cast<double>(std::max<int64_t>(data.tokens_per_sample, 1))
                                      : 0.0;
        std::string fields = fmt::format("epoch {} | loss {:.4f} | lr {:.3e} | grad_norm {:.4f}", stats.epoch,
                                         stats.loss, stats.lr, stats.grad_norm);
        if (config.fp16.enabled) fields += fmt::format(" | loss_scale {}", stats.loss_scale);
        std::printf("%s\n", progress_line(p, fields).c_str());
        interval_seconds = 0.0;
        interval_samples = 0;
      }
      std::fflush(stdout);
    }
    const bool last = stats.step == steps;
    if (data.val && (last || (data.eval.interval > 0 && stats.step % data.eval.interval == 0))) validate(stats.step);
    if (sample && (last || (sample->interval > 0 && stats.step % sample->interval == 0))) print_sample(stats.step);
    if (!checkpoint.dir.empty() && (last || (checkpoint.save_interval > 0 && stats.step % checkpoint.save_interval == 0)))
      save();
    if (lead) std::fflush(stdout);
  }
  if (lead) {
    const int64_t ran = steps - first_step;
    const double per_sec = total_seconds > 0 ? static_cast<double>(ran * engine.global_batch()) / total_seconds : 0;
    std::string line = fmt::format("done: {} steps in {} | loss {:.4f} -> {:.4f}", ran,
                                   fmt::format("{:.2f} s", total_seconds), first_loss, last_loss);
    if (val_loss) line += fmt::format(" | validation loss {:.4f}", *val_loss);
    line += fmt::format(" | {} samples/s", format_rate(per_sec));
    if (data.tokens_per_sample > 0)
      line += fmt::format(" | {} tokens/s", format_rate(per_sec * static_cast<double>(data.tokens_per_sample)));
    if (engine.skipped_steps() > 0)
      line += fmt::format(" | {} skipped on overflow, loss scale {}", engine.skipped_steps(), engine.loss_scale());
    std::printf("%s\n", line.c_str());
    std::printf("memory per rank at peak: %s; peak RSS %s\n", memory_line(engine.memory()).c_str(),
                format_bytes(peak_rss()).c_str());
    std::printf("sent per rank per step: %s\n", comms_line(group->comms(), sent_before, ran).c_str());
    if (config.comms_logger.enabled) std::printf("%s", group->comms().summary().c_str());
  }
  group->barrier();  // nobody tears the store down while a peer still needs it
  return 0;
}

}  // namespace
}  // namespace ds

int main(int argc, char** argv) {
  // A peer that dies closes its sockets; writing to one must fail as a communication error that names
  // the operation, not kill this rank with SIGPIPE (which dsrun would then race against the real cause).
  ::signal(SIGPIPE, SIG_IGN);
  // Debian's OpenBLAS misdetects recent CPUs and runs ~5x slower; this re-executes dsworker with
  // OPENBLAS_CORETYPE set when that happens (a value the user set is always kept).
  if (std::string warning = ds::cpu::blas_fix_coretype(argv); !warning.empty())
    std::fprintf(stderr, "dsworker: warning: %s\n", warning.c_str());
  // Every step allocates and frees the same large buffers (activations, gradients). glibc would
  // give the freed top of the heap back to the kernel each time (its trim threshold) and serve the
  // biggest blocks with fresh mmaps, so the next step page-faults and zeroes ~160 MiB again (~10% of
  // a GPT step, measured). Keep freed memory in the process instead (blocks up to glibc's largest
  // mmap threshold, 32 MiB, come from the heap): peak RSS is unchanged.
  ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  ds::WorkerOptions o;
  CLI::App app{"dsworker: one training rank (start it with dsrun)", "dsworker"};
  app.add_option("--model", o.model, "Model plugin: a built-in name (mlp) or a path to a plugin .so");
  app.add_option("--config,--deepspeed_config", o.config, "ds_config file (JSON or YAML)")->required();
  app.add_option("--steps", o.steps, "Optimizer steps to run (default: one epoch)")->check(CLI::PositiveNumber);
  app.add_option("--epochs", o.epochs, "Passes over the data (ignored with --steps)")->check(CLI::PositiveNumber);
  app.add_option("--seed", o.seed, "Seed for initialisation and data order (default: the config's seed)");
  app.add_option("--metrics", o.metrics, "Write one JSON object per step to this file (rank 0)");
  app.add_option("--resume", o.resume,
                 "auto (default: from the checkpoint dir's latest tag, if any), never, or a tag to load");
  app.add_flag("--print_config,--print-config", o.print_config, "Print the resolved config as JSON and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return ds::train(o);
  } catch (const ds::ConfigError& e) {
    std::fprintf(stderr, "dsworker: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsworker: error: %s\n", e.what());
    return 1;
  }
}
