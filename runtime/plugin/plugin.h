// The model-plugin loader: opens a plugin shared library (ds_plugin.h ABI), checks its ABI version
// (3, or 2 through the adapter in plugin_v2.h), creates its model on a compute backend from the
// config's "model" block, and wraps every table call in a checked C++ method that throws
// ds::PluginError ("plugin mlp: layer fc1: forward: <plugin's message>").
//
// Resolution of `name_or_path` in Plugin::load:
//   - contains '/' or ends in ".so": a file path (relative to the working directory);
//   - otherwise a plugin name, opened as libds_model_<name>.so from the first of these that has it:
//     each directory of $DSWORKER_PLUGIN_PATH (colon-separated), <exe dir>/../plugins (the build
//     tree), <exe dir>/../lib/dsrun/plugins (an install).
// Load errors name the file: not found (with every place searched), dlopen's error, no
// `ds_plugin_entry`, `plugin /x/libfoo.so: ABI version 9, this dsworker supports 2 and 3`, a NULL
// table entry, create() failing (with the plugin's message; "not on the cuda backend" for a model
// that runs on the CPU only), or an invalid layer description. A create() that returns
// DS_CONFIG_ERROR (a wrong "model" block) throws ds::ConfigError instead.
//
// Layer descriptions are read once at load and kept as C++ structs. Tensor arguments stay
// ds_tensor (the engine's buffers are passed through untouched); the wrappers check the layer
// index (the plugin's SDK checks shapes). Not thread-safe per instance: one rank, one Plugin.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plugin/ds_plugin.h"

namespace ds {

struct ParamInfo {
  std::string name;  // within the layer, e.g. "weight"; the full name is "<layer>.<name>"
  ds_shape shape;
  ds_init_kind init;
  float a, b;  // normal(mean=a, std=b) or uniform[a, b)
  std::string tied_to;  // "" or the full name of the earlier layer's parameter this one is
  ds_shard shard{-1, 1};  // tensor parallelism: how the full tensor was split (`shape` is this rank's share)
  int64_t numel() const;
};

// This rank's place in a tensor- or sequence-parallel group (ds_plugin.h); size 1: none.
struct ParallelRank {
  int rank = 0, size = 1;
};

struct LayerInfo {
  std::string name;  // unique within the model, e.g. "fc1"
  std::vector<ParamInfo> params;
};

// "[4, 10]"; numel of a shape (1 for a scalar).
std::string shape_str(const ds_shape& s);
int64_t shape_numel(const ds_shape& s);

class Plugin {
 public:
  // Opens the plugin and creates its model from `model_json` (a JSON object as text; "" = "{}") on
  // `backend` (which must outlive the Plugin; nullptr = the CPU backend, backend/backend.h).
  // With `tp.size` > 1 the model is asked to split itself (model.tensor_parallel, ds_plugin.h), with
  // `sp.size` > 1 to split sequences (model.sequence_parallel); a plugin that cannot is refused with a
  // ConfigError saying so.
  static std::unique_ptr<Plugin> load(const std::string& name_or_path, const std::string& model_json,
                                      const ds_backend* backend = nullptr, ParallelRank tp = {}, ParallelRank sp = {});
  // The file load() would open for `name_or_path`; throws PluginError listing the places searched.
  static std::string resolve(const std::string& name_or_path);
  // Where a plugin name is looked up, in order (see the top of this file).
  static std::vector<std::string> search_dirs();

  ~Plugin();  // destroys the model, then closes the library
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const std::string& path() const { return path_; }  // the file opened
  const std::string& name() const { return name_; }  // the plugin's own name, e.g. "mlp"
  uint32_t abi_version() const { return abi_version_; }  // 3, or 2 (adapted)
  const ds_backend& backend() const { return *backend_; }

  int32_t num_layers() const { return static_cast<int32_t>(layers_.size()); }
  const LayerInfo& layer(int32_t i) const;
  const std::vector<LayerInfo>& layers() const { return layers_; }

  ds_shape output_shape(int32_t layer, const ds_shape& input) const;
  size_t workspace_bytes(int32_t layer, const ds_shape& input) const;
  // params / grad_params: arrays of one tensor per declared parameter of the layer, in
  // declaration order (layer(i).params). grad_input: nullptr for layer 0. See ds_plugin.h for
  // the overwrite / accumulate rules.
  void forward(int32_t layer, const ds_tensor* params, const ds_tensor& input, ds_tensor& output, void* workspace,
               const ds_batch& batch) const;
  void backward(int32_t layer, const ds_tensor* params, const ds_tensor& input, const ds_tensor& output,
                const ds_tensor& grad_output, ds_tensor* grad_input, ds_tensor* grad_params, void* workspace,
                const ds_batch& batch) const;

  ds_dataset_info dataset_info() const;
  // The last layer's predictions for a batched input shape (ndim 0: the model makes none).
  ds_shape predictions_shape(const ds_shape& input) const;
  // Fills input [n, ...] and target [n, ...] with samples indices[0..n-1].
  void get_batch(const int64_t* indices, int64_t n, ds_tensor& input, ds_tensor& target) const;
  // Tensor parallelism: the group the model was split over (load's tp) and the collectives its layers
  // call (valid while the Plugin lives), before any layer runs.
  ParallelRank tensor_parallel() const { return tp_; }
  ParallelRank sequence_parallel() const { return sp_; }
  void set_collectives(const ds_collectives* collectives);

 private:
  Plugin() = default;
  [[noreturn]] void fail(int32_t layer, const char* call) const;  // throws with last_error()
  const LayerInfo& checked_layer(int32_t layer, const char* call) const;

  std::string path_, name_;
  uint32_t abi_version_ = 0;
  void* lib_ = nullptr;
  const ds_plugin_api* api_ = nullptr;
  const ds_backend* backend_ = nullptr;
  ds_describe_predictions_fn describe_predictions_ = nullptr;  // optional functions (lookup)
  ds_get_batch_fn get_batch_ = nullptr;
  ds_set_collectives_fn set_collectives_ = nullptr;
  ParallelRank tp_, sp_;
  void* model_ = nullptr;
  std::vector<LayerInfo> layers_;
};

}  // namespace ds
