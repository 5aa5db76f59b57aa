// Internal to ds_config: one parser per section, each reading its key from the top-level Section
// (so the key counts as known) and validating it completely, plus the file loaders.
#pragma once
#include <map>
#include <optional>
#include <string>

#include "config/ds_config.h"
#include "config/section.h"

namespace ds::cfg {

// The whole tree; `ctx` names it in messages and collects errors, warnings and notes. Throws
// ConfigErrors with every error at the end.
DsConfig parse_in(const nlohmann::json& root, Context& ctx, int world_size, const TrainerArgs& args);

// Replaces the Hugging Face Trainer's "auto" values in `root` with what the Trainer would write there
// (auto_values.cpp), and fills a config without any batch size with the Trainer's; a note per value.
// True when scheduler.params.total_num_steps was "auto" and args.total_steps is unknown (left 1).
bool resolve_auto(nlohmann::json& root, Context& ctx, int world_size, const TrainerArgs& args);

// The optimizer of a config without an optimizer section: AdamW with torch's defaults, its lr from
// --lr, else the scheduler's peak lr, else 1e-3 (a note says so).
OptimizerConfig default_optimizer(const nlohmann::json& root, Context& ctx, const TrainerArgs& args);

// nullopt when the section is absent (the caller refuses that after the unknown-key check).
std::optional<OptimizerConfig> parse_optimizer(Section& top);
// The optimizer's demands on other sections (the 1-bit optimizers: ZeRO stage 0, and for 1-bit
// LAMB under fp16 a dynamic loss scale), once every section is parsed.
void check_optimizer_fits(Context& ctx, const DsConfig& config);
// `optimizer` decides whether OneCycle can cycle momentum (only optimizers with betas).
std::optional<SchedulerConfig> parse_scheduler(Section& top, const std::optional<OptimizerConfig>& optimizer);
ZeroConfig parse_zero(Section& top);
Fp16Config parse_fp16(Section& top);
Bf16Config parse_bf16(Section& top);
AioConfig parse_aio(Section& top);
CommsLoggerConfig parse_comms_logger(Section& top);
MonitorConfig parse_monitor(Section& top, const char* key);  // csv_monitor, tensorboard
ActivationCheckpointingConfig parse_activation_checkpointing(Section& top);
// `pipeline` and `tensor_parallel`; stages x tensor-parallel size x sequence_parallel_size must divide
// `world_size`.
PipelineConfig parse_pipeline(Section& top, int world_size);
TensorParallelConfig parse_tensor_parallel(Section& top);
void check_model_parallel_sizes(Context& ctx, const DsConfig& c, int world_size);
// pipeline.stages x tensor_parallel.autotp_size x sequence_parallel_size as given when they are positive
// integers (else 1 each): the ranks that are not data-parallel,
// for the batch sizes' "auto" values, resolved before the sections are read (which report bad values).
int64_t peek_model_parallel_size(const nlohmann::json& root);
CheckpointConfig parse_checkpoint(Section& top);
TorchAutocastConfig parse_torch_autocast(Section& top);

// What dsworker cannot do with a resolved config (refusals as errors naming the key and value) and
// what it does differently (notes), so `--print_config` reports everything training would.
void check_support(const DsConfig& c, Context& ctx);

// The 1-based line of each key path in JSON text that parses ("zero_optimization.stage" → 7;
// array elements as "a[0]").
std::map<std::string, int> json_key_lines(const std::string& text);

// DeepSpeed top-level keys dsworker does not implement: warns (ignored) or fails (refused).
void check_foreign_keys(Section& top);

// JSON text → tree (comments allowed); duplicate keys and syntax errors are ConfigErrors naming `name`.
nlohmann::json parse_json_text(const std::string& text, const std::string& name);

// YAML text → the same JSON tree a JSON file would give, and the 1-based line of each key path.
struct YamlTree {
  nlohmann::json tree;
  std::map<std::string, int> lines;  // "zero_optimization.stage" → 7
};
YamlTree parse_yaml_text(const std::string& text, const std::string& name);

}  // namespace ds::cfg
