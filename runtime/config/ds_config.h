// ds_config: DeepSpeed's `ds_config.json` (or the same tree in YAML), parsed, validated and resolved
// into typed sections for the engine. Defaults are DeepSpeed's *code* defaults (reference
// deepspeed-runtime.md §2); where the docs disagree the field comment says so. Every error is a
// ds::ConfigError naming the file, the key path and the value:
//   `ds_config.json: zero_optimization.stage: 5 is not one of 0, 1, 2, 3`
//   `ds_config.json: optimizer.params.betaz: unknown key (did you mean 'betas'?)`
// (YAML errors also carry the line: `ds_config.yaml:7: zero_optimization.stage: …`).
// Unknown keys are errors at every level. DeepSpeed sections dsworker does not implement are either
// accepted with a warning (monitoring, profiling, speed-only settings) or refused (anything that
// would change training); the table is in foreign_keys.cpp. An explicit `null` means "not given".
// Sections DeepSpeed validates with pydantic (zero_optimization, its offload blocks, bf16,
// comms_logger, csv_monitor) treat the string "auto" as "not given", as DeepSpeed does.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/errors.h"

namespace ds {

enum class Dtype { fp32, fp16, bf16 };
std::string_view dtype_name(Dtype dtype);  // "fp32", "fp16", "bf16"

// ---- optimizer ---------------------------------------------------------------------------------

enum class OptimizerType { Adam, AdamW, Adagrad, RMSprop, SGD, Lion, Muon, Lamb, OneBitAdam, ZeroOneAdam, OneBitLamb };
std::string_view optimizer_type_name(OptimizerType type);  // "Adam", "AdamW", "SGD", "Lamb", "OneBitAdam", …

// FusedAdam / DeepSpeedCPUAdam (reference §4.2).
struct AdamParams {
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;             // added after bias-correcting sqrt(v)
  double weight_decay = 0.0;     // 0.01 when torch_adam selects torch.optim.AdamW (its default)
  bool bias_correction = true;
  bool adam_w_mode = true;       // effective: type AdamW, or params.adam_w_mode (default true even for "Adam")
  bool torch_adam = false;       // DeepSpeed: use torch.optim.Adam[W]; same update rule here
};

// torch.optim.SGD (reference §4.4).
struct SgdParams {
  double momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
};

// torch.optim.Adagrad (DeepSpeed's "Adagrad" without offload): lr 1e-2 (OptimizerConfig::lr).
struct AdagradParams {
  double lr_decay = 0.0;                  // this step's lr: lr / (1 + (step − 1)·lr_decay)
  double weight_decay = 0.0;              // L2, added to the gradient
  double initial_accumulator_value = 0.0; // the sum of squares before the first step
  double eps = 1e-10;
};

// torch.optim.RMSprop (DeepSpeed's "RMSprop", a torch.optim class by name): lr 1e-2 (OptimizerConfig::lr).
struct RmspropParams {
  double alpha = 0.99;        // the squares' running average: s ← alpha·s + (1 − alpha)·d²
  double eps = 1e-8;
  double weight_decay = 0.0;  // L2, added to the gradient
  double momentum = 0.0;      // > 0: a momentum buffer over d/√s
  bool centered = false;      // divide by √(s − mean(d)²)
};

// FusedLion / DeepSpeedCPULion: lr 1e-3 (OptimizerConfig::lr), no eps, decoupled weight decay.
struct LionParams {
  double beta1 = 0.9, beta2 = 0.999;
  double weight_decay = 0.0;
};

// DeepSpeed's MuonWithAuxAdam: Muon for the matrices (runtime/optim/muon.cpp says which), Adam for the rest.
// OptimizerConfig::lr is the Muon group's (params.muon_lr, else params.lr, else 0.02); the Adam group's is
// adam_lr at that lr, scaled with it by the schedule.
struct MuonParams {
  double adam_lr = 3e-4;          // params.adam_lr, else params.lr, else 3e-4
  double momentum = 0.95;         // Muon's β
  double weight_decay = 0.0;      // decoupled, both groups
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-10;  // the Adam group's
};

// FusedLamb (reference §4.3).
struct LambParams {
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  bool eps_inside_sqrt = false;  // denom sqrt(v + eps) instead of sqrt(v) + eps
  double weight_decay = 0.0;
  bool bias_correction = true;   // folded into the step size: lr·sqrt(1-β2^t)/(1-β1^t)
  double max_coeff = 10.0, min_coeff = 0.01;  // clamp of the per-tensor trust ratio
};

// The communication-compressed optimizers (DeepSpeed's fp16/onebit/*.py; the update rules are in
// runtime/optim/onebit_adam.cpp, zero_one_adam.cpp, onebit_lamb.cpp). Common to the three: no bias
// correction (bias_correction and eps_inside_sqrt are accepted and unused, as in DeepSpeed), ZeRO
// stage 0 only, and cuda_aware / comm_backend_name accepted and ignored (dsworker compresses over its
// Gloo group).
struct CompressedCommParams {
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;               // added to the update: u + wd·p
  bool cuda_aware = false;                 // ignored
  std::string comm_backend_name = "nccl";  // ignored; one of nccl, mpi, hccl, compressed
};

// 1-bit Adam: Adam (frozen variance after the warm-up) with 1-bit compressed momentum.
struct OneBitAdamParams : CompressedCommParams {
  int64_t freeze_step = 100000;  // warm-up steps with the engine's full gradient all-reduce
};

// 0/1 Adam: variance updated at exponentially sparser steps, then frozen; after that, local steps
// with a 1-bit momentum sync at exponentially sparser steps.
struct ZeroOneAdamParams : CompressedCommParams {
  int64_t var_freeze_step = 100000;   // the variance is frozen after this step
  int64_t var_update_scaler = 16;     // variance updates before their interval doubles
  int64_t local_step_scaler = 32678;  // steps before the sync interval doubles (DeepSpeed's value, sic)
  int64_t local_step_clipper = 16;    // largest sync interval
};

// 1-bit LAMB: LAMB during the warm-up, then a frozen trust ratio scaled per step, 1-bit momentum.
struct OneBitLambParams : CompressedCommParams {
  int64_t freeze_step = 100000;
  double max_coeff = 10.0, min_coeff = 0.01;  // clamp of the warm-up trust ratio
  double coeff_beta = 0.9;                    // EMA of the trust ratio frozen for the compression stage
  double factor_max = 4.0, factor_min = 0.5;  // clamp of the compression-stage scaling factor
  double factor_threshold = 0.1;              // its largest relative change per step
};

struct OptimizerConfig {
  OptimizerType type = OptimizerType::Adam;
  double lr = 1e-3;              // SGD: torch ≥ 2.2's default; older torch required it; Adagrad, RMSprop: 1e-2; Muon: 0.02
  // AdamParams for Adam and AdamW
  std::variant<AdamParams, AdagradParams, RmspropParams, SgdParams, LionParams, MuonParams, LambParams, OneBitAdamParams,
               ZeroOneAdamParams, OneBitLambParams>
      params;
  bool legacy_fusion = false;    // accepted; no effect in dsworker
};

// ---- LR scheduler (formulas in runtime/optim/lr_schedule.h) ------------------------------------

// DeepSpeed's own schedules, then the torch.optim.lr_scheduler classes DeepSpeed builds by name (those a
// JSON file can configure: no callables, no other schedulers, no metrics).
enum class SchedulerType {
  WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest,
  StepLR, MultiStepLR, ConstantLR, LinearLR, ExponentialLR, PolynomialLR, CosineAnnealingLR,
  CosineAnnealingWarmRestarts
};
std::string_view scheduler_type_name(SchedulerType type);
enum class WarmupType { log, linear };

// WarmupLR and WarmupDecayLR.
struct WarmupParams {
  double warmup_min_lr = 0.0, warmup_max_lr = 0.001;
  int64_t warmup_num_steps = 1000;         // as written; the schedule uses max(2, this)
  WarmupType warmup_type = WarmupType::log;
  int64_t total_num_steps = 0;             // WarmupDecayLR only (required there)
};

// WarmupCosineLR: ratios of the optimizer's lr.
struct WarmupCosineParams {
  int64_t total_num_steps = 0;             // required
  double warmup_min_ratio = 0.0;
  int64_t warmup_num_steps = 1000;         // as written; the schedule uses max(2, this)
  double cos_min_ratio = 0.0001;
  WarmupType warmup_type = WarmupType::log;
};

// OneCycle. Step sizes are numbers (DeepSpeed does float arithmetic on them).
struct OneCycleParams {
  double cycle_min_lr = 0.0, cycle_max_lr = 0.0;  // both required
  double decay_lr_rate = 0.0;
  double cycle_first_step_size = 2000;
  double cycle_second_step_size = 2000;    // null in the file: = cycle_first_step_size
  double decay_step_size = 0;              // 0: no decay after the cycle
  bool cycle_momentum = true;              // resolved: false when the optimizer has no betas (SGD)
  double cycle_min_mom = 0.8, cycle_max_mom = 0.9;
  double decay_mom_rate = 0.0;
};

// LRRangeTest: lr = min_lr·(1 + step_rate·interval), interval = (t + 1)/step_size (floored with staircase).
struct LrRangeTestParams {
  double min_lr = 1e-3;     // lr_range_test_min_lr
  int64_t step_size = 2000; // lr_range_test_step_size
  double step_rate = 1.0;   // lr_range_test_step_rate
  bool staircase = false;   // lr_range_test_staircase
};

// The torch.optim.lr_scheduler classes, over the optimizer's lr as their base; each type reads the fields
// that name it (torch's keyword arguments and defaults).
struct TorchScheduleParams {
  int64_t step_size = 0;               // StepLR (required)
  double gamma = 0.1;                  // StepLR, MultiStepLR; ExponentialLR (required there)
  std::vector<int64_t> milestones;     // MultiStepLR (required), sorted
  double factor = 1.0 / 3.0;           // ConstantLR
  double start_factor = 1.0 / 3.0;     // LinearLR
  double end_factor = 1.0;             // LinearLR
  int64_t total_iters = 5;             // ConstantLR, LinearLR, PolynomialLR
  double power = 1.0;                  // PolynomialLR
  double T_max = 0.0;                  // CosineAnnealingLR (required)
  double eta_min = 0.0;                // CosineAnnealingLR, CosineAnnealingWarmRestarts
  int64_t T_0 = 0;                     // CosineAnnealingWarmRestarts (required)
  int64_t T_mult = 1;                  // CosineAnnealingWarmRestarts
};

struct SchedulerConfig {
  SchedulerType type = SchedulerType::WarmupLR;
  std::variant<WarmupParams, WarmupCosineParams, OneCycleParams, LrRangeTestParams, TorchScheduleParams> params;
};

// ---- precision ---------------------------------------------------------------------------------

struct Fp16Config {
  bool enabled = false;
  bool auto_cast = false;             // cast floating forward inputs to fp16
  double loss_scale = 0.0;            // 0: dynamic scaling; > 0: this static scale
  int64_t initial_scale_power = 16;   // dynamic: initial scale 2^p
  int64_t loss_scale_window = 1000;   // clean steps before doubling
  int64_t hysteresis = 2;             // overflows tolerated before halving (ZeRO's scaler)
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1.0;
  // DeepSpeed QUIRK not reproduced: with none of the scaler keys written, DeepSpeed's wrappers use
  // their own hard-coded defaults (ZeRO: 2^32, hysteresis 1). dsworker always uses the values above.
};

struct Bf16Config {
  bool enabled = false;               // key "bf16", or legacy "bfloat16"
  bool immediate_grad_update = false;
  bool check_grad_overflow = true;    // a non-finite gradient skips the step (DeepSpeed >= 0.19.3);
                                      // false: training stops instead (DeepSpeed would apply it)
  bool master_weights_and_grads = false;  // bf16_master_weights_and_grads: no fp32 master copy or fp32
                                          // gradients for the optimizer (ZeRO 1-3)
  bool optimizer_states = false;          // bf16_optimizer_states: bf16 moments (needs the above)
};

// torch_autocast: dsworker's 16-bit compute with fp32 master weights, i.e. fp16 or bf16 enabled.
struct TorchAutocastConfig {
  bool enabled = false;
  Dtype dtype = Dtype::bf16;          // DeepSpeed: None = torch.autocast's device default (bf16 on CPU)
};

// ---- zero_optimization (reference §2.6) -------------------------------------------------------

enum class OffloadDevice { none, cpu, nvme };

struct OffloadParamConfig {
  OffloadDevice device = OffloadDevice::none;
  std::optional<std::string> nvme_path;
  int64_t buffer_count = 5;
  int64_t buffer_size = 100'000'000;  // elements
  int64_t max_in_cpu = 1'000'000'000; // elements
  bool pin_memory = true;             // DeepSpeed >= 0.19.5 (false before)
};

struct OffloadOptimizerConfig {
  OffloadDevice device = OffloadDevice::none;
  std::optional<std::string> nvme_path;
  int64_t buffer_count = 4;
  bool pin_memory = true;             // DeepSpeed >= 0.19.5 (false before)
  bool pipeline_read = false, pipeline_write = false;
  bool fast_init = false;
  double ratio = 1.0;                 // fraction of sub-groups updated on CPU; < 1 needs stage 3
};

// The `aio` block (deepspeed/runtime/swap_tensor/aio_config.py): how NVMe offload's swap files are read
// and written (dsworker: one io_uring ring, runtime/offload/aio_queue.h).
struct AioConfig {
  int64_t block_size = 1'048'576;   // bytes per request piece
  int64_t queue_depth = 8;          // pieces in flight
  int64_t intra_op_parallelism = 1; // DeepSpeed's I/O threads; io_uring needs none (accepted)
  bool single_submit = false;
  bool overlap_events = true;
};

struct ZeroPpLocoConfig {
  double err_beta = 0.8;
  int64_t reset_T = 1024;
};

// Sizes and thresholds are in elements. Parsed fully for every stage; which stages run is the
// engine's decision.
struct ZeroConfig {
  int stage = 0;                                     // 0..3 (`true` in the file = stage 1, legacy)
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  int64_t reduce_bucket_size = 500'000'000;
  bool use_multi_rank_bucket_allreduce = true;
  bool allgather_partitions = true;
  int64_t allgather_bucket_size = 500'000'000;
  bool overlap_comm = false;                         // resolved: null in the file = (stage == 3)
  bool load_from_fp32_weights = true;
  bool elastic_checkpoint = false;
  std::optional<OffloadParamConfig> offload_param;   // legacy cpu_offload_param: true = device cpu
  std::optional<OffloadOptimizerConfig> offload_optimizer;  // legacy cpu_offload: true = device cpu
  int64_t sub_group_size = 1'000'000'000;            // docs say 1e12
  int64_t prefetch_bucket_size = 50'000'000;         // stage3_prefetch_bucket_size; docs say 5e8
  int64_t param_persistence_threshold = 100'000;     // stage3_param_persistence_threshold
  int64_t model_persistence_threshold = INT64_MAX;   // stage3_model_persistence_threshold (sys.maxsize)
  int64_t max_live_parameters = 1'000'000'000;       // stage3_max_live_parameters
  int64_t max_reuse_distance = 1'000'000'000;        // stage3_max_reuse_distance
  bool gather_16bit_weights_on_model_save = false;   // stage3_…, legacy stage3_gather_fp16_…
  int64_t module_granularity_threshold = 0;          // stage3_module_granularity_threshold
  bool use_all_reduce_for_fetch_params = false;      // stage3_use_all_reduce_for_fetch_params
  bool ignore_unused_parameters = true;
  bool round_robin_gradients = false;
  int64_t zero_hpz_partition_size = 1;
  bool zero_quantized_weights = false;
  bool zero_quantized_nontrainable_weights = false;
  bool zero_quantized_gradients = false;
  std::optional<ZeroPpLocoConfig> zeropp_loco_param;
  int64_t mics_shard_size = -1;
  bool mics_hierarchical_params_gather = false;
  bool memory_efficient_linear = true;
  bool pipeline_loading_checkpoint = false;
  bool override_module_apply = true;
  bool log_trace_cache_warnings = false;
};

// ---- other sections ----------------------------------------------------------------------------

struct CommsLoggerConfig {
  bool enabled = false, verbose = false, prof_all = true, debug = false;
  std::vector<std::string> prof_ops;  // collective names to profile when prof_all is false
};

// csv_monitor and tensorboard, which share DeepSpeed's monitor keys: csv_monitor writes
// output_path/job_name/<metric>.csv, tensorboard an event file in output_path/job_name/ as DeepSpeed's
// SummaryWriter does (worker/tensorboard.h).
struct MonitorConfig {
  bool enabled = false;
  std::string output_path;
  std::string job_name = "DeepSpeedJobName";
};

struct ActivationCheckpointingConfig {
  bool present = false;  // the block is in the config: dsworker recomputes every layer in backward
  bool partition_activations = false, cpu_checkpointing = false;
  bool contiguous_memory_optimization = false;
  std::optional<int64_t> number_checkpoints;
  bool synchronize_checkpoint_boundary = false, profile = false;
};

// DeepSpeed's `pipeline` block. DeepSpeed parses `stages` and `partition` but takes both from the
// PipelineModule in the training script; dsworker has no such script, so it reads them here.
struct PipelineConfig {
  bool present = false;
  int64_t stages = 1;                    // pipeline stages; "auto" or absent: 1 (no pipeline)
  std::string partition = "parameters";  // "parameters", "uniform" or "type:REGEX" (pipe/pipe.h); DeepSpeed's
                                         // config default "best" means "parameters" (its module's default)
  int64_t activation_checkpoint_interval = 0;  // > 0: activations recomputed in backward (every layer)
  bool pipe_partitioned = true;  // with tensor parallelism: each tensor-parallel rank sends 1/T of an activation
  bool grad_partitioned = true;  // (of a gradient) to the next (previous) stage, which all-gathers them
};

// DeepSpeed's `tensor_parallel` block (AutoTP). dsworker's models declare their own split (the gpt
// plugin's is Megatron's), so only the size is read.
struct TensorParallelConfig {
  int64_t autotp_size = 1;  // tensor-parallel ranks; DeepSpeed's 0 (off) and 1 both mean none
};

enum class TagValidation { Ignore, Warn, Fail };

// DeepSpeed's `checkpoint` keys plus dsworker's own (dir, save_interval, keep_last).
struct CheckpointConfig {
  std::string dir;                    // ours: where checkpoints go; "" = no checkpoints
  int64_t save_interval = 0;          // ours: save every N applied steps; 0 = never
  int64_t keep_last = 0;              // ours: keep the newest N; 0 = keep all
  TagValidation tag_validation = TagValidation::Warn;
  bool use_node_local_storage = false;
};

// ---- the whole config --------------------------------------------------------------------------

struct DsConfig {
  std::string origin;                 // the name errors and warnings use, e.g. "ds_config.json"
  int world_size = 1;                 // data-parallel size the batch triad was resolved for: the world
                                      // size / (pipeline.stages x tensor_parallel.autotp_size x
                                      // sequence_parallel_size)
  int64_t sequence_parallel_size = 1; // DeepSpeed-Ulysses: ranks that split each sequence (top-level key)

  // train_batch_size = train_micro_batch_size_per_gpu × gradient_accumulation_steps × world_size
  int64_t train_batch_size = 0;               // samples per optimizer step, all ranks
  int64_t train_micro_batch_size_per_gpu = 0; // samples per forward/backward, one rank
  int64_t gradient_accumulation_steps = 0;

  std::optional<int64_t> steps_per_print;     // null (code default; docs say 10): no progress line
  bool wall_clock_breakdown = false;
  bool memory_breakdown = false;
  uint64_t seed = 42;                         // dsworker's own key (DeepSpeed has none)
  double gradient_clipping = 1.0;             // global-norm threshold; 0 disables (DeepSpeed >= 0.19.3; 0 before)
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  Dtype communication_data_type = Dtype::fp32;  // resolved: null = grad_accum_dtype
  bool dataloader_drop_last = false;
  bool zero_allow_untested_optimizer = false;

  OptimizerConfig optimizer;                  // no section: AdamW with torch's defaults (default_optimizer)
  std::optional<SchedulerConfig> scheduler;   // nullopt: constant lr
  bool scheduler_total_steps_auto = false;    // total_num_steps was "auto" and the run's length is not
                                              // known yet: the caller sets it (dsworker: --steps/--epochs)
  Fp16Config fp16;                            // fp16 and bf16 are never both enabled
  Bf16Config bf16;
  TorchAutocastConfig torch_autocast;         // resolved into fp16 / bf16 above
  Dtype grad_accum_dtype = Dtype::fp32;       // data_types.grad_accum_dtype, resolved: null = fp32
                                              // if bf16 without ZeRO, else the model dtype
  ZeroConfig zero_optimization;
  AioConfig aio;
  CommsLoggerConfig comms_logger;
  MonitorConfig csv_monitor;
  MonitorConfig tensorboard;
  ActivationCheckpointingConfig activation_checkpointing;
  PipelineConfig pipeline;
  TensorParallelConfig tensor_parallel;
  CheckpointConfig checkpoint;
  nlohmann::json model = nlohmann::json::object();  // for the model plugin, untouched
  nlohmann::json data = nlohmann::json::object();   // for the data source, untouched
  nlohmann::json sample = nlohmann::json::object(); // text generation (engine/generate.h), untouched

  std::vector<std::string> warnings;          // accepted-but-ignored keys and DeepSpeed warnings
  std::vector<std::string> notes;             // what was chosen for the user: "auto" values, defaults

  Dtype model_dtype() const;                  // fp16 / bf16 when enabled, else fp32
};

// What a trainer supplies for the values a config leaves to it: the Hugging Face Trainer's "auto"
// (its TrainingArguments; dsworker's flags), the optimizer when the config has none, and the model's
// hidden size for the ZeRO bucket sizes. Unset fields take the Trainer's defaults (kTrainer*).
struct TrainerArgs {
  std::optional<int64_t> micro_batch;         // per_device_train_batch_size (8)
  std::optional<int64_t> grad_accum;          // gradient_accumulation_steps (1)
  std::optional<double> lr;                   // learning_rate (5e-5; a missing optimizer section: 1e-3)
  std::optional<double> weight_decay;         // weight_decay (0; a missing optimizer section: 0.01)
  std::optional<int64_t> warmup_steps;        // warmup_steps (0)
  bool fp16 = false, bf16 = false;            // --fp16 / --bf16
  std::optional<int64_t> total_steps;         // the run's length, when known before training
  // The model's hidden size (HF: config.hidden_size), from the config's model block; nullopt when
  // unknown. Called only when a ZeRO size is "auto".
  std::function<std::optional<int64_t>(const nlohmann::json& model)> hidden_size;
};

// Every problem found in a config, thrown once parsing is complete: what() is the errors, one per
// line (a single error reads exactly as that error); `warnings` are those found beside them.
struct ConfigErrors : ConfigError {
  ConfigErrors(std::vector<std::string> errors, std::vector<std::string> warnings);
  std::vector<std::string> errors, warnings;
};

// Reads and resolves a config file: JSON (comments allowed), or YAML when the name ends in .yaml/.yml.
DsConfig load_config(const std::string& path, int world_size, const TrainerArgs& args = {});

// The same for a file's text already in memory; `path` names it in messages, and its extension picks YAML.
DsConfig load_config_text(const std::string& text, const std::string& path, int world_size,
                          const TrainerArgs& args = {});

// Validates and resolves an already-parsed tree; `origin` names it in messages.
DsConfig parse_config(const nlohmann::json& root, const std::string& origin, int world_size,
                      const TrainerArgs& args = {});

// The fully resolved config (defaults filled, triad resolved), itself a valid ds_config.
nlohmann::ordered_json resolved_json(const DsConfig& config);

}  // namespace ds
