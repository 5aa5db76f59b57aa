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
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <utility>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "comm/heartbeat.h"
#include "comm/nccl_group.h"
#include "comm/process_group.h"
#include "comm/rendezvous.h"
#include "comm/store.h"
#include "config/ds_config.h"
#include "core/errors.h"
#include "cpu/blas.h"
#include "cpu/matmul_half.h"
#include "cpu/parallel.h"
#include "backend/backend.h"
#include "cuda/launch.h"
#include "engine/engine.h"
#include "checkpoint/checkpoint.h"
#include "data_source.h"
#include "engine/generate.h"
#include "metrics.h"
#include "aio_bench.h"
#include "selftest.h"
#include "report.h"
#include "hf_import.h"
#include "system_report.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "pipe/links.h"
#include "plugin/plugin.h"

namespace ds {
namespace {

struct WorkerOptions {
  std::string model, config, metrics;
  std::string resume = "auto";  // auto: from checkpoint.dir's latest when there is one; never; or a tag
  std::optional<int64_t> steps, epochs;
  std::optional<uint64_t> seed;
  bool print_config = false;
  std::string report;  // --report text|json: what this build and machine offer, then exit
  std::string aio_bench;  // --aio_bench DIR: swap-file bandwidth in DIR, then exit
  int64_t aio_bench_mib = 256;
  bool selftest = false;       // --selftest: the CUDA kernels on this machine's GPU against the CPU, then exit
  std::string selftest_json;   // --selftest_json PATH: its report as JSON too
  TrainerArgs trainer;  // what the Hugging Face Trainer's "auto" values become (config/auto_values.cpp)
};

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

// DS_OFFLOAD_BUFFERED_IO=1: NVMe offload may use buffered I/O where the file system has no O_DIRECT.
bool buffered_io_allowed() {
  const char* value = std::getenv("DS_OFFLOAD_BUFFERED_IO");
  return value && std::string_view(value) == "1";
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
  e.skip_overflow_steps = c.bf16.enabled && c.bf16.check_grad_overflow;
  e.low_precision_master = c.bf16.enabled && c.bf16.master_weights_and_grads;
  const auto& offload = c.zero_optimization.offload_optimizer;
  if (offload && offload->device == OffloadDevice::nvme && e.zero_stage > 0) {
    offload::SwapConfig swap;
    swap.dir = offload->nvme_path.value_or("");
    swap.sub_group = static_cast<size_t>(c.zero_optimization.sub_group_size);
    swap.buffer_count = static_cast<size_t>(offload->buffer_count);
    swap.aio = {c.aio.block_size, c.aio.queue_depth, c.aio.single_submit, c.aio.overlap_events};
    swap.allow_buffered = buffered_io_allowed();
    e.nvme_offload = swap;
  }
  const auto& params = c.zero_optimization.offload_param;
  if (params && params->device == OffloadDevice::nvme && e.zero_stage == 3) {
    offload::ParamSwapConfig swap;
    swap.dir = params->nvme_path.value_or("");
    swap.buffer_count = static_cast<size_t>(params->buffer_count);
    swap.buffer_size = static_cast<size_t>(params->buffer_size);
    swap.max_in_cpu = static_cast<size_t>(params->max_in_cpu);
    swap.aio = {c.aio.block_size, c.aio.queue_depth, c.aio.single_submit, c.aio.overlap_events};
    swap.allow_buffered = buffered_io_allowed();
    e.param_offload = swap;
  }
  // On a GPU the optimizer steps there unless offload_optimizer sends it to the CPU (stage 0 ignores it, as
  // DeepSpeed does), or the engine cannot (Engine::optimizer_place); offload's pin_memory (either block) says
  // whether the host buffers the copies use are page-locked.
  e.optimizer_on_device = !offload || offload->device == OffloadDevice::none || e.zero_stage == 0;
  e.params_on_host = e.zero_stage == 3 && params && params->device != OffloadDevice::none;
  e.timed_phases = c.wall_clock_breakdown;
  e.pin_memory = (!offload || offload->pin_memory) && (!params || params->pin_memory);
  e.recompute = c.activation_checkpointing.present || c.pipeline.activation_checkpoint_interval > 0;
  e.pipe_partitioned = c.pipeline.pipe_partitioned;
  e.grad_partitioned = c.pipeline.grad_partitioned;
  e.seed = seed;
  return e;
}

// How the layers compute in 16-bit training, for the start-up note: " (bf16 matmuls with fp32 accumulation<on>,
// the other ops in fp32)"; "" in fp32.
std::string arithmetic(const DsConfig& config, const std::string& on = "") {
  if (!config.bf16.enabled && !config.fp16.enabled) return "";
  return fmt::format(" ({} matmuls with fp32 accumulation{}, the other ops in fp32)",
                     config.bf16.enabled ? "bf16" : "fp16", on);
}

// DeepSpeed's DS_ACCELERATOR (dsrun sets it to cuda where the machine has a GPU): cpu (or unset), or
// cuda, which needs a usable GPU (without one: an error naming CUDA's, exit 1); any other value is an
// error naming it. With cuda, the layers run on the GPU that LOCAL_RANK names among the visible ones
// (engine/device_layers.h), and the optimizer there too where the engine can (device_step.h), else on
// the CPU, as ZeRO-Offload keeps it. In bf16 the matmuls multiply in bf16 (the engine sets the backend so); the other ops,
// and every op in fp16, compute in fp32 on 16-bit-rounded values, as the CPU's layers do. `note`
// says where the layers run, `index` which GPU, `own_gpu` whether each of this host's ranks has a GPU of its own.
std::unique_ptr<backend::Device> select_device(const DsConfig& config, std::string& note, int& index, bool& own_gpu) {
  const char* value = std::getenv("DS_ACCELERATOR");
  const std::string_view v = value ? value : "";
  if (v.empty() || v == "cpu") return nullptr;
  if (v != "cuda") throw ConfigError(fmt::format("DS_ACCELERATOR='{}' is not one of cpu, cuda (from the environment)", v));
  int gpus = 0;
  try {
    gpus = cuda::device_count();
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("DS_ACCELERATOR=cuda, but no usable GPU: {}", e.what()));
  }
  if (gpus == 0) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    throw std::runtime_error(fmt::format("DS_ACCELERATOR=cuda, but no GPU is visible (CUDA_VISIBLE_DEVICES={})",
                                         visible ? visible : "unset"));
  }
  try {  // read at each attention call; a bad value is an error now rather than at the first layer
    cuda::attention_kernel(1, 1, 1, amp::Half::BF16);
  } catch (const std::exception& e) {
    throw ConfigError(fmt::format("{} (from the environment)", e.what()));
  }
  const char* local_rank = std::getenv("LOCAL_RANK");
  const int device = (local_rank ? std::atoi(local_rank) : 0) % gpus;
  index = device;
  const char* local = std::getenv("LOCAL_SIZE");
  own_gpu = (local && std::atoi(local) > 0 ? std::atoi(local) : 1) <= gpus;
  auto cuda = std::make_unique<backend::Cuda>(device);
  note = fmt::format("the layers run on cuda:{}, {}{}", device, cuda->describe(), arithmetic(config));
  return cuda;
}

// The CPU's ops: with bf16 or fp16 its matmuls multiply 16-bit operands (as on a GPU and in DeepSpeed).
const ds_backend* cpu_table(const DsConfig& config, std::string& note) {
  if (!config.bf16.enabled && !config.fp16.enabled) return backend::cpu();
  note = "the layers run on the CPU" + arithmetic(config, config.bf16.enabled ? " on " + cpu::matmul_bf16_kernel() : "");
  if (config.bf16.enabled && !cpu::bf16_units())
    note += "; this CPU has no AMX or AVX-512-BF16 units: bf16 is no faster than fp32 here";
  return backend::cpu(config.bf16.enabled ? amp::Half::BF16 : amp::Half::F16);
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

// The model's hidden size as the Hugging Face Trainer means it (config.hidden_size): the widest
// activation between the plugin's layers for one sample (a transformer's residual width).
int64_t widest_activation(const Plugin& plugin) {
  ds_shape shape = plugin.dataset_info().input_shape;
  for (int i = shape.ndim; i > 0; --i) shape.dims[i] = shape.dims[i - 1];
  shape.dims[0] = 1;
  ++shape.ndim;
  int64_t widest = 0;
  for (int32_t layer = 0; layer + 1 < plugin.num_layers(); ++layer) {  // the last layer outputs the loss
    shape = plugin.output_shape(layer, shape);
    if (shape.ndim >= 2) widest = std::max(widest, shape.dims[shape.ndim - 1]);
  }
  return widest;
}

// The model block as the plugin sees it: without dsworker's own init_from key (hf_import.h).
nlohmann::json plugin_model_block(const nlohmann::json& model) {
  nlohmann::json out = model;
  if (out.is_object()) out.erase("init_from");
  return out;
}

// The model plugin with the config's model block; a bad block is an error in the config file.
std::unique_ptr<Plugin> load_plugin(const WorkerOptions& o, const nlohmann::json& model,
                                    const ds_backend* backend = nullptr, ParallelRank tp = {}, ParallelRank sp = {}) {
  try {
    return Plugin::load(o.model, plugin_model_block(model).dump(), backend, tp, sp);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: {}", o.config, e.what()));
  }
}

// Loads the config with the flags as the trainer's arguments; the model plugin is loaded on the
// way when a ZeRO size is "auto" (it needs the model's hidden size), and kept in `plugin`.
DsConfig load_worker_config(const WorkerOptions& o, int world_size, std::unique_ptr<Plugin>& plugin) {
  TrainerArgs args = o.trainer;
  args.total_steps = o.steps;
  args.hidden_size = [&](const nlohmann::json& model) -> std::optional<int64_t> {
    if (o.model.empty()) return std::nullopt;
    plugin = load_plugin(o, model);
    return widest_activation(*plugin);
  };
  return load_config(o.config, world_size, args);
}

// The plugin's layers split into config.pipeline.stages by its partition method.
std::vector<int> stage_bounds(const DsConfig& config, const Plugin& plugin) {
  std::vector<std::string> names;
  std::vector<size_t> params;
  for (int i = 0; i < plugin.num_layers(); ++i) {
    const LayerInfo layer = plugin.layer(i);
    names.push_back(layer.name);
    size_t n = 0;
    for (const ParamInfo& p : layer.params) n += static_cast<size_t>(p.numel());  // a tied one counts, as in DeepSpeed
    params.push_back(n);
  }
  try {
    return pipe::partition(config.pipeline.partition, static_cast<int>(config.pipeline.stages), names, params);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: {}", config.origin, e.what()));
  }
}

// "dsworker: layout: 2 stages x 2 data-parallel x 2 tensor-parallel ranks (rank = stage x 4 + data rank x 2 +
// tensor rank)", then per stage (with a pipeline): "dsworker: pipeline: stage 0: ranks 0-3, layers 0-2 (embed .. h1),
// 120448 parameters" (this rank's shares of the split tensors).
std::string parallel_layout(const pipe::Topology& t, const std::vector<int>& bounds, const Plugin& plugin) {
  std::string out;
  if (t.model_size == 1 && t.seq_size == 1) {
    out = fmt::format("dsworker: pipeline: {} stages x {} data-parallel rank{} (rank = stage x {} + data rank)\n",
                      t.pipe_size, t.data_size, t.data_size > 1 ? "s" : "", t.data_size);
  } else {
    const int seq = t.seq_size * t.model_size;  // ranks per data coordinate
    std::string sizes = fmt::format("{} stage{} x {} data-parallel", t.pipe_size, t.pipe_size > 1 ? "s" : "", t.data_size);
    std::string formula = fmt::format("stage x {} + data rank x {}", t.data_size * seq, seq);
    if (t.seq_size > 1) {
      sizes += fmt::format(" x {} sequence-parallel", t.seq_size);
      formula += t.model_size > 1 ? fmt::format(" + sequence rank x {}", t.model_size) : " + sequence rank";
    }
    if (t.model_size > 1) {
      sizes += fmt::format(" x {} tensor-parallel", t.model_size);
      formula += " + tensor rank";
    }
    out = fmt::format("dsworker: layout: {} ranks (rank = {})\n", sizes, formula);
  }
  for (int s = 0; s < t.pipe_size && t.pipe_size > 1; ++s) {
    const int first = bounds[static_cast<size_t>(s)], end = bounds[static_cast<size_t>(s) + 1];
    int64_t params = 0;
    for (int i = first; i < end; ++i)
      for (const ParamInfo& p : plugin.layer(i).params) params += p.numel();
    const int r0 = t.rank({s, 0, 0, 0}), r1 = t.rank({s, t.data_size - 1, t.model_size - 1, t.seq_size - 1});
    out += fmt::format("dsworker: pipeline: stage {}: rank{} {}, layers {}-{} ({} .. {}), {} parameters\n", s,
                       r0 == r1 ? "" : "s", r0 == r1 ? std::to_string(r0) : fmt::format("{}-{}", r0, r1), first,
                       end - 1, plugin.layer(first).name, plugin.layer(end - 1).name, params);
  }
  return out;
}

// "pipeline bubble: stage 0 idle 31.2% of the 1F1B schedule (0.41 s busy of 0.60 s), ..." from
// [schedule seconds, compute seconds] per stage, against (P - 1) / (M + P - 1) for equal stages.
std::string bubble_lines(const std::vector<double>& per_stage, int64_t micro_batches) {
  const size_t stages = per_stage.size() / 2;
  std::string out;
  for (size_t s = 0; s < stages; ++s) {
    const double schedule = per_stage[2 * s], busy = per_stage[2 * s + 1];
    out += fmt::format("pipeline: stage {} idle {:.1f}% of its 1F1B schedules ({:.2f} s computing of {:.2f} s)\n", s,
                       schedule > 0 ? 100.0 * (1.0 - busy / schedule) : 0.0, busy, schedule);
  }
  const double theory = static_cast<double>(stages - 1) / static_cast<double>(micro_batches + static_cast<int64_t>(stages) - 1);
  return out + fmt::format("pipeline: the bubble of equal stages is (P - 1) / (M + P - 1) = {:.1f}% with P = {} stages, "
                           "M = {} micro-batches\n", 100.0 * theory, stages, micro_batches);
}

void print_lines(const char* kind, const std::vector<std::string>& lines) {
  for (const auto& line : lines) std::fprintf(stderr, "dsworker: %s: %s\n", kind, line.c_str());
}

int train(const WorkerOptions& o) {
  if (!o.report.empty()) {
    const auto report = system_report();
    std::cout << (o.report == "json" ? report.dump(2) + "\n" : format_report(report));
    return 0;
  }
  if (!o.aio_bench.empty()) return aio_bench(o.aio_bench, o.aio_bench_mib);
  if (o.selftest || !o.selftest_json.empty()) {
    const char* local_rank = std::getenv("LOCAL_RANK");  // one GPU per rank under dsrun
    return run_selftest(local_rank ? std::atoi(local_rank) : 0, o.selftest_json, machine_nccl());
  }
  if (o.config.empty()) throw ConfigError("--config (--deepspeed_config) is required");
  std::unique_ptr<Plugin> plugin;
  if (o.print_config) {  // connects to nothing: only WORLD_SIZE matters (for the batch triad)
    const DsConfig config = load_worker_config(o, world_size_from_env(), plugin);
    print_lines("warning", config.warnings);
    print_lines("note", config.notes);
    auto resolved = resolved_json(config);
    if (config.scheduler_total_steps_auto) resolved["scheduler"]["params"]["total_num_steps"] = "auto";
    std::cout << resolved.dump(2) << "\n";
    return 0;
  }
  start_heartbeat();  // dsrun's watchdog hears from this rank from here on (comm/heartbeat.h)
  const JobEnv env = read_job_env();
  if (o.model.empty()) throw ConfigError("--model is required (a built-in name such as mlp, or a plugin .so path)");
  DsConfig config = load_worker_config(o, env.world_size, plugin);
  std::string device_note;
  int device_index = 0;
  bool own_gpu = false;
  const std::unique_ptr<backend::Device> device = select_device(config, device_note, device_index, own_gpu);
  const ds_backend* table = device ? device->table() : cpu_table(config, device_note);
  const bool lead = env.rank == 0;
  cpu::set_threads(kernel_threads_for());
  if (lead) {
    print_lines("warning", config.warnings);
    print_lines("note", config.notes);
    if (!device_note.empty()) std::fprintf(stderr, "dsworker: device: %s\n", device_note.c_str());
  }

  // On a device the model is created on its backend (a plugin loaded for the config's "auto" sizes was
  // created on the CPU's).
  // With tensor parallelism each rank holds its share of the model (pipe/pipe.h's layout: the tensor-parallel
  // rank varies fastest).
  // With sequence parallelism each rank sees its chunk of every sequence.
  const pipe::Topology topology{static_cast<int>(config.pipeline.stages), config.world_size,
                                static_cast<int>(config.tensor_parallel.autotp_size),
                                static_cast<int>(config.sequence_parallel_size)};
  const pipe::Topology::Coord me = topology.coord(env.rank);
  const ParallelRank tp{me.model, topology.model_size}, sp{me.seq, topology.seq_size};
  if (!plugin || &plugin->backend() != table || tp.size > 1 || sp.size > 1)
    plugin = load_plugin(o, config.model, table, tp, sp);
  std::shared_ptr<Store> store;
  std::unique_ptr<TcpStoreServer> server;
  if (env.world_size == 1) {
    store = make_memory_store();
  } else {
    if (lead) server = serve_tcp_store(env.master_port, env.token);
    store = connect_tcp_store(env.master_addr, env.master_port, env.token, env.comm_timeout);
    rendezvous(*store, env.rank, env.world_size, env.comm_timeout, env.plan_id);
  }
  const uint64_t seed = o.seed.value_or(config.seed);
  EngineConfig engine_settings = engine_config(config, seed);
  engine_settings.device = device.get();
  // `group` is this rank's data-parallel group (pipe/pipe.h's layout): the ranks of its stage holding the
  // same tensor-parallel share, with sequence parallelism those of every sequence chunk too (data-major).
  std::unique_ptr<ProcessGroup> group, tensor_group, sequence_group;
  std::unique_ptr<pipe::StageLinks> links;
  if (topology.world() == topology.data_size) {
    group = make_gloo_group(store, env.rank, env.world_size, "dp", env.comm_timeout);
  } else {
    group = make_gloo_group(store, me.data * sp.size + me.seq, topology.data_size * sp.size,
                            fmt::format("dp-{}-{}", me.pipe, me.model), env.comm_timeout);
    if (tp.size > 1) {
      tensor_group = make_gloo_group(store, me.model, tp.size, fmt::format("tp-{}-{}-{}", me.pipe, me.data, me.seq),
                                     env.comm_timeout);
      engine_settings.tensor_parallel = tensor_group.get();
    }
    if (sp.size > 1) {
      sequence_group = make_gloo_group(store, me.seq, sp.size, fmt::format("sp-{}-{}-{}", me.pipe, me.data, me.model),
                                       env.comm_timeout);
      engine_settings.sequence_parallel = sequence_group.get();
    }
    engine_settings.stage_bounds = {0, plugin->num_layers()};
    if (topology.pipe_size > 1) {
      links = std::make_unique<pipe::StageLinks>(store, topology, env.rank, env.comm_timeout);
      engine_settings.pipeline = links.get();
      engine_settings.stage_bounds = stage_bounds(config, *plugin);
    }
    if (lead) std::fprintf(stderr, "%s", parallel_layout(topology, engine_settings.stage_bounds, *plugin).c_str());
  }

  // Several data-parallel ranks on GPUs: NCCL all-reduces or reduce-scatters the gradients (and all-gathers the
  // partitioned parameters) in the GPUs' memory, so the optimizer can step there (engine/device_step.h; stage 3
  // without offload_param gathers each layer there, engine/device_gather.h). Not on
  // the emulated device, whose memory NCCL cannot use, nor where ranks share a GPU (NCCL refuses that).
  std::unique_ptr<ProcessGroup> device_group;
  if (device && group->size() > 1 && topology.world() == topology.data_size && engine_settings.optimizer_on_device &&
      !engine_settings.params_on_host && own_gpu && nccl_built() && !cuda::emulated())
    device_group = make_nccl_group(real_nccl_api(), store, env.rank, env.world_size, "dp-nccl", env.comm_timeout,
                                   device_index);
  engine_settings.device_group = device_group.get();
  TrainingData data = load_training_data(config, *plugin);
  Engine engine(engine_settings, *plugin, *group,
                [&](size_t n, NormReducer reducer) {
                  return make_optimizer(config.optimizer, n, reducer, group.get(),
                                        config.bf16.optimizer_states ? amp::Storage::BF16 : amp::Storage::F32);
                },
                make_lr_schedule(config.scheduler, config.optimizer.lr), data.train.get());
  if (lead && device) std::fprintf(stderr, "dsworker: device: %s\n", engine.optimizer_place().c_str());
  std::string device_noted = engine.device_note();  // said once, and again when the engine adds to it (below)
  if (!device_noted.empty())
    std::fprintf(stderr, "dsworker: warning: rank %d: device: %s\n", env.rank, device_noted.c_str());
  std::optional<SampleConfig> sample;
  if (!config.sample.empty()) {
    sample = parse_sample_config(config.sample);
    if (data.vocab == 0)
      throw ConfigError(fmt::format("sample: the model {} is not a language model; remove the sample block",
                                    plugin->name()));
    if (const auto prompt = config.sample.find("prompt");
        data.tokenizer && prompt != config.sample.end() && prompt->is_string()) {  // text: the tokenizer's ids
      const auto ids = data.tokenizer->encode(prompt->get<std::string>(), "sample.prompt");
      sample->prompt.assign(ids.begin(), ids.end());
    }
  }
  if (const auto init_from = config.model.find("init_from"); init_from != config.model.end()) {
    if (!init_from->is_string())
      throw ConfigError(fmt::format("{}: model.init_from: {} is not a path (a Hugging Face GPT-2 folder)", o.config,
                                    init_from->dump()));
    if (plugin->name() != "gpt")
      throw ConfigError(fmt::format("{}: model.init_from: a Hugging Face GPT-2 folder needs --model gpt (this is {})",
                                    o.config, plugin->name()));
    const std::string loaded = init_from_hf_gpt2(engine, init_from->get<std::string>(), config.model);
    if (lead) std::fprintf(stderr, "dsworker: model: %s\n", loaded.c_str());
  }
  const CheckpointConfig& checkpoint = config.checkpoint;
  if (!checkpoint.dir.empty())  // every rank: each host removes what its own killed saves left
    for (const std::string& path : ckpt::remove_stale_temporaries(checkpoint.dir))
      std::fprintf(stderr, "dsworker: removed %s (left by a save that was killed)\n", path.c_str());
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
  if (config.scheduler_total_steps_auto) {  // "auto": the run's length, known now
    std::visit([&](auto& p) {
      if constexpr (requires { p.total_num_steps; }) p.total_num_steps = steps;
    }, config.scheduler->params);
    engine.set_lr_schedule(make_lr_schedule(config.scheduler, config.optimizer.lr));
    if (lead) std::fprintf(stderr, "dsworker: note: scheduler.params.total_num_steps: \"auto\" -> %lld (the run's length)\n",
                           static_cast<long long>(steps));
  }
  const int64_t tokens_per_step = engine.global_batch() * data.tokens_per_sample;
  if (resume_tag && engine.steps_taken() >= steps) {  // the job is already done: say so, train nothing
    if (lead)
      std::printf("checkpoint %s/%s is at step %lld >= %s: nothing to train\n", checkpoint.dir.c_str(),
                  resume_tag->c_str(), static_cast<long long>(engine.steps_taken()),
                  (o.steps    ? fmt::format("--steps {}", steps)
                   : o.epochs ? fmt::format("--epochs {} ({} steps)", *o.epochs, steps)
                              : fmt::format("1 epoch, the default ({} steps)", steps)).c_str());
    group->barrier();  // nobody tears the store down while a peer still needs it
    if (tensor_group) tensor_group->barrier();
    if (sequence_group) sequence_group->barrier();
    if (links) links->pipe().barrier();
    return 0;
  }
  if (lead) {
    MemoryReport m = engine.memory();
    std::fprintf(stderr,
                 "dsworker: model %s: %zu parameters in %d layers; world size %d, ZeRO stage %d, %s (gradients %s%s%s), "
                 "global batch %lld "
                 "(micro %lld x accumulation %lld x ranks %d); %lld steps (%lld per epoch)\n",
                 plugin->name().c_str(), engine.model_parameters(), plugin->num_layers(), env.world_size,
                 static_cast<int>(config.zero_optimization.stage), std::string(dtype_name(config.model_dtype())).c_str(),
                 std::string(dtype_name(config.grad_accum_dtype)).c_str(),
                 config.bf16.master_weights_and_grads ? ", bf16 master weights" : "",
                 config.bf16.optimizer_states ? ", bf16 optimizer states" : "", static_cast<long long>(engine.global_batch()),
                 static_cast<long long>(config.train_micro_batch_size_per_gpu),
                 static_cast<long long>(config.gradient_accumulation_steps), config.world_size,
                 static_cast<long long>(steps), static_cast<long long>(engine.steps_per_epoch()));
    if (!data.description.empty())
      std::fprintf(stderr, "dsworker: data: %s; %lld tokens per step\n", data.description.c_str(),
                   static_cast<long long>(tokens_per_step));
    std::fprintf(stderr, "dsworker: memory per rank at start: %s\n", memory_line(m).c_str());
    if (group->size() > 1) std::fprintf(stderr, "dsworker: collectives over %s\n", group->transport());
    if (m.nvme > 0 && engine.layout().partition_size() <= static_cast<size_t>(config.zero_optimization.sub_group_size))
      std::fprintf(stderr, "dsworker: warning: zero_optimization.sub_group_size: %lld elements hold the whole partition "
                           "(%zu): the swap buffers hold as much as the swap file; a smaller sub-group saves the memory\n",
                   static_cast<long long>(config.zero_optimization.sub_group_size), engine.layout().partition_size());
  }
  std::map<std::string, uint64_t> sent_before;
  for (const char* op : {"allreduce", "reduce_scatter", "allgather", "alltoall", "broadcast"})
    sent_before[op] = group->comms().stats(op).sent_bytes;
  const uint64_t pipeline_sent_before = links ? links->sent_bytes() : 0;
  const uint64_t tensor_sent_before = tensor_group ? tensor_group->comms().sent_bytes() : 0;
  const uint64_t sequence_sent_before = sequence_group ? sequence_group->comms().sent_bytes() : 0;

  std::optional<MetricsWriter> metrics;
  if (lead) {
    std::string csv_dir;
    // As DeepSpeed's os.path.join(output_path, job_name): an empty output_path means the working directory.
    if (config.csv_monitor.enabled)
      csv_dir = (std::filesystem::path(config.csv_monitor.output_path) / config.csv_monitor.job_name).string();
    std::string tensorboard_dir;
    if (config.tensorboard.enabled)
      tensorboard_dir = (std::filesystem::path(config.tensorboard.output_path) / config.tensorboard.job_name).string();
    metrics.emplace(o.metrics, csv_dir, tensorboard_dir, data.tokens_per_sample, /*append=*/resume_tag.has_value(),
                    config.wall_clock_breakdown);
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
    auto as_text = [&](const std::vector<int32_t>& tokens) {
      if (!data.tokenizer) return tokens_text(tokens, data.vocab);
      const std::vector<uint32_t> ids(tokens.begin(), tokens.end());
      return data.tokenizer->decode(ids);
    };
    for (const auto& text : texts) std::printf("%s%s\n----\n", as_text(sample->prompt).c_str(), as_text(text).c_str());
  };
  const int64_t every = config.steps_per_print.value_or(10);
  double total_seconds = 0.0, first_loss = 0.0, last_loss = 0.0, interval_seconds = 0.0;
  int64_t interval_samples = 0;
  const int64_t first_step = engine.steps_taken();
  bool told_unaveraged = false;  // a 1-bit optimizer's first step on unaveraged gradients was announced
  double schedule_seconds = 0.0, compute_seconds = 0.0;  // pipeline: this stage's, over the steps after the first
  for (int64_t s = first_step; s < steps; ++s) {
    StepStats stats = engine.step();
    if (engine.device_note() != device_noted) {  // e.g. stage 3's pool pinned a buffer made during the step
      device_noted = engine.device_note();
      std::fprintf(stderr, "dsworker: warning: rank %d: device: %s\n", env.rank, device_noted.c_str());
    }
    if (s > first_step) {
      schedule_seconds += stats.schedule_seconds;
      compute_seconds += stats.compute_seconds;
    }
    total_seconds += stats.seconds;
    interval_seconds += stats.seconds;
    interval_samples += stats.samples;
    if (s == first_step) first_loss = stats.loss;
    last_loss = stats.loss;
    if (lead) {
      metrics->write(stats, stats.step * engine.global_batch());
      if (config.wall_clock_breakdown)
        std::printf("%s\n", wall_clock_line(stats, config.pipeline.stages > 1).c_str());
      if (!stats.averaged && !std::exchange(told_unaveraged, true))
        std::printf("step %lld: %s: the engine's gradient all-reduce is off (the optimizer all-reduces 1-bit "
                    "compressed tensors itself)\n", static_cast<long long>(stats.step),
                    std::string(optimizer_type_name(config.optimizer.type)).c_str());
      if (stats.skipped && config.fp16.enabled)
        std::printf("step %lld: overflow, skipping; loss scale %s -> %s\n", static_cast<long long>(stats.step),
                    fmt::format("{}", stats.loss_scale).c_str(), fmt::format("{}", engine.loss_scale()).c_str());
      else if (stats.skipped)
        std::printf("step %lld: overflow (gradient norm %g), skipping\n", static_cast<long long>(stats.step),
                    stats.grad_norm);
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
    if (engine.skipped_steps() > 0 && config.fp16.enabled)
      line += fmt::format(" | {} skipped on overflow, loss scale {}", engine.skipped_steps(), engine.loss_scale());
    else if (engine.skipped_steps() > 0)
      line += fmt::format(" | {} skipped on overflow", engine.skipped_steps());
    std::printf("%s\n", line.c_str());
    std::printf("memory per rank at peak: %s; peak RSS %s\n", memory_line(engine.peak_memory()).c_str(),
                format_bytes(peak_rss()).c_str());
    if (const auto device = engine.device_memory())
      std::printf("device memory per rank at peak: %s (the engine's buffers)\n", memory_line(*device).c_str());
    std::printf("sent per rank per step: %s\n", comms_line(group->comms(), sent_before, ran).c_str());
    if (tensor_group && ran > 0)
      std::printf("sent per rank per step to its tensor-parallel group: %s (all-reduces of activations and their "
                  "gradients; evaluation included)\n",
                  format_bytes((tensor_group->comms().sent_bytes() - tensor_sent_before) / static_cast<uint64_t>(ran)).c_str());
    if (sequence_group && ran > 0)
      std::printf("sent per rank per step to its sequence-parallel group: %s (all-to-alls around attention; "
                  "evaluation included)\n",
                  format_bytes((sequence_group->comms().sent_bytes() - sequence_sent_before) / static_cast<uint64_t>(ran)).c_str());
    if (links && ran > 0)
      std::printf("sent by rank 0 per step to the other stages: %s (activations, tied gradients, norm)\n",
                  format_bytes((links->sent_bytes() - pipeline_sent_before) / static_cast<uint64_t>(ran)).c_str());
    if (const auto swap = engine.swap_stats()) std::printf("%s\n", swap_line("NVMe offload", *swap).c_str());
    if (const auto swap = engine.param_swap_stats())
      std::printf("%s\n", swap_line("NVMe parameter offload", *swap).c_str());
    if (config.comms_logger.enabled) std::printf("%s", group->comms().summary().c_str());
  }
  if (links) {  // every stage's busy and waiting time, printed by rank 0
    const std::vector<double> mine{schedule_seconds, compute_seconds};
    std::vector<double> all(2 * static_cast<size_t>(topology.pipe_size));
    links->pipe().allgather(mine.data(), all.data(), 2, DataType::F64);
    if (lead && schedule_seconds > 0)
      std::printf("%s", bubble_lines(all, config.gradient_accumulation_steps).c_str());
  }
  group->barrier();  // nobody tears the store down while a peer still needs it
  if (tensor_group) tensor_group->barrier();
  if (sequence_group) sequence_group->barrier();
  if (links) links->pipe().barrier();
  return 0;
}

}  // namespace
}  // namespace ds

namespace {

// A number option's lower bound, its error naming the bound plainly (CLI11's PositiveNumber prints its
// range up to the largest double).
CLI::Validator at_least(double min) {
  return CLI::Validator(
      [min](std::string& value) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(value, v)) return fmt::format("{} is not a number", value);
        return v >= min ? std::string() : fmt::format("must be at least {} (got {})", min, value);
      },
      fmt::format(">={}", min));
}

}  // namespace

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
  app.add_option("--config,--deepspeed_config", o.config, "ds_config file (JSON or YAML); required to train");
  // Given twice (scripts/demo.sh passes --steps 600, then the user's arguments), the last one counts.
  app.add_option("--steps", o.steps, "Optimizer steps to run (default: one epoch)")
      ->check(at_least(1))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--epochs", o.epochs, "Passes over the data (ignored with --steps)")
      ->check(at_least(1))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--seed", o.seed, "Seed for initialisation and data order (default: the config's seed)");
  app.add_option("--metrics", o.metrics, "Write one JSON object per step to this file (rank 0)");
  app.add_option("--resume", o.resume,
                 "auto (default: from the checkpoint dir's latest tag, if any), never, or a tag to load");
  app.add_option("--report", o.report, "Print what this build and machine offer (as `dsrun report`) and exit")
      ->expected(0, 1)
      ->default_str("text")
      ->check(CLI::IsMember({"text", "json"}));
  app.add_option("--aio_bench", o.aio_bench,
                 "Measure NVMe offload's swap-file write and read GB/s in this directory for a few `aio` settings, "
                 "and exit");
  app.add_option("--aio_bench_mib", o.aio_bench_mib, "MiB moved each way per setting by --aio_bench (default 256)");
  app.add_flag("--selftest", o.selftest,
               "Check every CUDA kernel on this machine's GPU (LOCAL_RANK's) against the CPU reference, print a "
               "table and exit: 0 all passed, 1 a check failed, 3 no usable GPU or a build without CUDA");
  app.add_option("--selftest_json", o.selftest_json, "With --selftest: also write its report as JSON to this file");
  app.add_flag("--print_config,--print-config", o.print_config,
               "Print the resolved config as JSON (warnings, notes and every error on stderr) and exit");
  // The Hugging Face Trainer's arguments that its "auto" config values become (README: "auto" values).
  ds::TrainerArgs& t = o.trainer;
  app.add_option("--train_micro_batch_size_per_gpu,--per_device_train_batch_size", t.micro_batch,
                 "\"auto\" micro batch (default 8, as the HF Trainer)")->check(at_least(1));
  app.add_option("--gradient_accumulation_steps", t.grad_accum, "\"auto\" accumulation steps (default 1)")
      ->check(at_least(1));
  app.add_option("--lr,--learning_rate", t.lr,
                 "\"auto\" learning rate (default 5e-5); also the lr of the default optimizer (no optimizer section)")
      ->check(at_least(0));
  app.add_option("--weight_decay", t.weight_decay, "\"auto\" weight decay (default 0); the default optimizer's (0.01)")
      ->check(at_least(0));
  app.add_option("--warmup_steps", t.warmup_steps, "\"auto\" scheduler warmup_num_steps (default 0)")
      ->check(at_least(0));
  app.add_flag("--fp16", t.fp16, "\"auto\" fp16.enabled becomes true");
  app.add_flag("--bf16", t.bf16, "\"auto\" bf16.enabled becomes true");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return ds::train(o);
  } catch (const ds::ConfigErrors& e) {
    ds::print_lines("warning", e.warnings);
    ds::print_lines("error", e.errors);
    if (e.errors.size() > 1) std::fprintf(stderr, "dsworker: %zu errors in %s\n", e.errors.size(), o.config.c_str());
    return 2;
  } catch (const ds::ConfigError& e) {
    std::fprintf(stderr, "dsworker: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsworker: error: %s\n", e.what());
    return 1;
  }
}
