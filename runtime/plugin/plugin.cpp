// The model-plugin loader (see plugin.h): resolution, dlopen, ABI and table checks, model
// creation, layer descriptions, and the checked call wrappers.
#include "plugin/plugin.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <system_error>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/errors.h"
#include "plugin/plugin_v2.h"
#include "plugin/table_check.h"

namespace ds {
namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string exe_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

bool valid_name(const std::string& name) {
  if (name.empty()) return false;
  for (unsigned char c : name)
    if (!(std::isalnum(c) || c == '_' || c == '-')) return false;
  return true;
}

const char* init_name(ds_init_kind k) {
  switch (k) {
    case DS_INIT_ZEROS: return "zeros";
    case DS_INIT_ONES: return "ones";
    case DS_INIT_NORMAL: return "normal";
    case DS_INIT_UNIFORM: return "uniform";
  }
  return nullptr;
}

}  // namespace

int64_t ParamInfo::numel() const { return shape_numel(shape); }

std::string shape_str(const ds_shape& s) {
  std::string out = "[";
  for (int i = 0; i < s.ndim && i < DS_MAX_DIMS; ++i) out += (i ? ", " : "") + std::to_string(s.dims[i]);
  return out + "]";
}

int64_t shape_numel(const ds_shape& s) {
  int64_t n = 1;
  for (int i = 0; i < s.ndim && i < DS_MAX_DIMS; ++i) n *= s.dims[i];
  return n;
}

std::vector<std::string> Plugin::search_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("DSWORKER_PLUGIN_PATH")) {
    std::string list = env;
    size_t start = 0;
    while (start <= list.size()) {
      const size_t end = std::min(list.find(':', start), list.size());
      if (end > start) dirs.push_back(list.substr(start, end - start));
      start = end + 1;
    }
  }
  const std::string exe = exe_dir();
  if (!exe.empty()) {
    dirs.push_back((fs::path(exe) / ".." / "plugins").lexically_normal().string());
    dirs.push_back((fs::path(exe) / ".." / "lib" / "dsrun" / "plugins").lexically_normal().string());
  }
  return dirs;
}

std::string Plugin::resolve(const std::string& name_or_path) {
  std::error_code ec;
  if (name_or_path.find('/') != std::string::npos || ends_with(name_or_path, ".so")) {
    const std::string path = fs::absolute(name_or_path, ec).lexically_normal().string();
    if (!fs::is_regular_file(path, ec)) throw PluginError("plugin " + path + ": no such file");
    return path;
  }
  if (!valid_name(name_or_path))
    throw PluginError("plugin '" + name_or_path +
                      "': not a plugin name (letters, digits, '_', '-') nor a path (with '/' or ending in .so)");
  const std::string file = "libds_model_" + name_or_path + ".so";
  const std::vector<std::string> dirs = search_dirs();
  for (const std::string& dir : dirs) {
    const fs::path p = fs::path(dir) / file;
    if (fs::is_regular_file(p, ec)) return fs::absolute(p, ec).lexically_normal().string();
  }
  std::string searched;
  for (const std::string& dir : dirs) searched += (searched.empty() ? "" : ", ") + dir;
  throw PluginError("plugin '" + name_or_path + "': " + file + " not found in " +
                    (searched.empty() ? "(no directories)" : searched) +
                    " (searched $DSWORKER_PLUGIN_PATH, then <dsworker dir>/../plugins and "
                    "<dsworker dir>/../lib/dsrun/plugins)");
}

std::unique_ptr<Plugin> Plugin::load(const std::string& name_or_path, const std::string& model_json,
                                     const ds_backend* backend, ParallelRank tp, ParallelRank sp) {
  std::unique_ptr<Plugin> p(new Plugin());
  p->path_ = resolve(name_or_path);
  p->tp_ = tp;
  p->sp_ = sp;
  const std::string where = "plugin " + p->path_ + ": ";

  dlerror();
  // RTLD_NODELETE: the library (and what it pulled in) stays mapped after dlclose. A plugin that
  // runs OpenMP loops (the built-in ones do) leaves libgomp's pool threads parked inside libgomp;
  // unmapping it under them crashes the process the next time they wake.
  p->lib_ = dlopen(p->path_.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (p->lib_ == nullptr) {
    const char* e = dlerror();
    throw PluginError(where + "cannot load: " + (e ? e : "unknown dlopen error"));
  }
  dlerror();
  void* sym = dlsym(p->lib_, DS_PLUGIN_ENTRY_SYMBOL);
  if (sym == nullptr)
    throw PluginError(where + "no '" DS_PLUGIN_ENTRY_SYMBOL "' symbol (not a dsworker model plugin, or built "
                      "without DS_PLUGIN(...) / ds_add_model_plugin)");
  const auto entry = reinterpret_cast<ds_plugin_entry_fn>(sym);
  const ds_plugin_api* raw = entry();
  if (raw == nullptr) throw PluginError(where + DS_PLUGIN_ENTRY_SYMBOL "() returned NULL");
  p->abi_version_ = raw->abi_version;  // the first field in every version
  p->backend_ = backend != nullptr ? backend : backend::cpu();

  char err[2048] = {0};
  void* model = nullptr;
  std::string split_json;  // with the keys the model splits itself by
  if (tp.size > 1 || sp.size > 1) {
    nlohmann::json block = nlohmann::json::parse(model_json.empty() ? std::string("{}") : model_json, nullptr, false);
    if (!block.is_object()) throw ConfigError(where + "the model block is not a JSON object");
    if (tp.size > 1) block["tensor_parallel"] = {{"rank", tp.rank}, {"size", tp.size}};
    if (sp.size > 1) block["sequence_parallel"] = {{"rank", sp.rank}, {"size", sp.size}};
    split_json = block.dump();
  }
  const char* json = !split_json.empty() ? split_json.c_str() : model_json.empty() ? "{}" : model_json.c_str();
  ds_status st = DS_ERROR;
  if (p->abi_version_ == DS_PLUGIN_ABI_VERSION) {
    p->api_ = raw;
    const ds_plugin_api& a = *raw;
    const std::string missing = plugin_table::first_missing(a, {{"lookup", a.lookup != nullptr}});
    if (!missing.empty()) throw PluginError(where + "function table entry '" + missing + "' is NULL");
    p->name_ = a.name;
    st = a.create(json, p->backend_, &model, err, sizeof err);
  } else if (p->abi_version_ == DS_PLUGIN_ABI_VERSION_2) {
    const auto& v2 = *reinterpret_cast<const ds_plugin_api_v2*>(raw);
    const std::string missing = plugin_v2::missing_entry(v2);
    if (!missing.empty()) throw PluginError(where + "function table entry '" + missing + "' is NULL");
    p->api_ = &plugin_v2::table();
    p->name_ = v2.name;
    st = plugin_v2::create(v2, json, p->backend_, &model, err, sizeof err);
  } else {
    throw PluginError(where + "ABI version " + std::to_string(p->abi_version_) + ", this dsworker supports 2 and " +
                      std::to_string(DS_PLUGIN_ABI_VERSION));
  }
  const ds_plugin_api& a = *p->api_;
  err[sizeof err - 1] = '\0';
  if (st == DS_CONFIG_ERROR && tp.size > 1 && std::string(err).starts_with("model.tensor_parallel: unknown key"))
    throw ConfigError(where + "the " + p->name_ + " model cannot be split for tensor parallelism (tensor_parallel."
                      "autotp_size " + std::to_string(tp.size) + ")");
  if (st == DS_CONFIG_ERROR && sp.size > 1 && std::string(err).starts_with("model.sequence_parallel: unknown key"))
    throw ConfigError(where + "the " + p->name_ + " model cannot split its sequences for sequence parallelism "
                      "(sequence_parallel_size " + std::to_string(sp.size) + ")");
  if (st == DS_CONFIG_ERROR) throw ConfigError(where + (err[0] ? err : "the model block is wrong (no message)"));
  if (st != DS_OK || model == nullptr)
    throw PluginError(where + "create failed" + (st == DS_UNSUPPORTED ? " (unsupported)" : "") + ": " +
                      (err[0] ? err : "(no message)"));
  p->model_ = model;
  p->describe_predictions_ = reinterpret_cast<ds_describe_predictions_fn>(a.lookup("describe_predictions"));
  p->get_batch_ = reinterpret_cast<ds_get_batch_fn>(a.lookup("get_batch"));
  p->set_collectives_ = reinterpret_cast<ds_set_collectives_fn>(a.lookup("set_collectives"));
  const auto describe_shard = reinterpret_cast<ds_describe_shard_fn>(a.lookup("describe_shard"));
  if (sp.size > 1 && p->set_collectives_ == nullptr)
    throw ConfigError(where + "the " + p->name_ + " model read model.sequence_parallel but has no set_collectives");
  if (tp.size > 1 && (p->set_collectives_ == nullptr || describe_shard == nullptr))
    throw ConfigError(where + "the " + p->name_ + " model read model.tensor_parallel but has no set_collectives "
                      "and describe_shard");

  const int32_t n = a.num_layers(model);
  if (n < 1) throw PluginError(where + "the model has " + std::to_string(n) + " layers");
  std::set<std::string> layer_names;
  for (int32_t i = 0; i < n; ++i) {
    ds_layer_desc d{};
    if (a.describe_layer(model, i, &d) != DS_OK) {
      const char* msg = a.last_error(model);
      throw PluginError(where + "describe_layer(" + std::to_string(i) + "): " + (msg && msg[0] ? msg : "(no message)"));
    }
    const std::string lwhere = where + "layer " + std::to_string(i) + ": ";
    if (d.name == nullptr || d.name[0] == '\0') throw PluginError(lwhere + "no name");
    LayerInfo info{d.name, {}};
    if (!layer_names.insert(info.name).second) throw PluginError(lwhere + "duplicate layer name '" + info.name + "'");
    if (d.num_params < 0 || (d.num_params > 0 && d.params == nullptr))
      throw PluginError(lwhere + info.name + ": bad parameter list");
    std::set<std::string> param_names;
    for (int32_t j = 0; j < d.num_params; ++j) {
      const ds_param_desc& pd = d.params[j];
      const std::string pname = pd.name ? pd.name : "";
      const std::string full = info.name + "." + pname;
      if (pname.empty() || !param_names.insert(pname).second)
        throw PluginError(lwhere + "parameter " + std::to_string(j) + " has an empty or duplicate name '" + pname + "'");
      if (pd.shape.ndim < 1 || pd.shape.ndim > DS_MAX_DIMS)
        throw PluginError(where + full + ": ndim " + std::to_string(pd.shape.ndim) + " is not in [1, 4]");
      for (int k = 0; k < pd.shape.ndim; ++k)
        if (pd.shape.dims[k] < 1) throw PluginError(where + full + ": shape " + shape_str(pd.shape) + " has an empty dimension");
      if (init_name(pd.init) == nullptr)
        throw PluginError(where + full + ": unknown init kind " + std::to_string(static_cast<int>(pd.init)));
      std::string tied = pd.tied_to ? pd.tied_to : "";
      if (!tied.empty()) {
        const ParamInfo* owner = nullptr;
        for (const LayerInfo& earlier : p->layers_)
          for (const ParamInfo& q : earlier.params)
            if (earlier.name + "." + q.name == tied) owner = &q;
        if (owner == nullptr)
          throw PluginError(where + full + ": tied to '" + tied + "', which is no parameter of an earlier layer");
        if (!owner->tied_to.empty())
          throw PluginError(where + full + ": tied to '" + tied + "', which is itself tied to '" + owner->tied_to + "'");
        if (shape_str(owner->shape) != shape_str(pd.shape))
          throw PluginError(where + full + ": shape " + shape_str(pd.shape) + " differs from its owner " + tied + "'s " +
                            shape_str(owner->shape));
      }
      ds_shard shard{-1, 1};
      if (tp.size > 1) {
        if (describe_shard(model, i, j, &shard) != DS_OK) p->fail(i, "describe_shard");
        if (shard.dim >= pd.shape.ndim || shard.blocks < 1)
          throw PluginError(where + full + ": shard dim " + std::to_string(shard.dim) + ", blocks " +
                            std::to_string(shard.blocks) + " do not fit its shape " + shape_str(pd.shape));
      }
      info.params.push_back({pname, pd.shape, pd.init, pd.a, pd.b, tied, shard});
    }
    p->layers_.push_back(std::move(info));
  }
  return p;
}

Plugin::~Plugin() {
  if (model_ != nullptr && api_ != nullptr) api_->destroy(model_);
  if (lib_ != nullptr) dlclose(lib_);
}

void Plugin::fail(int32_t layer, const char* call) const {
  const char* msg = api_->last_error(model_);
  std::string where = "plugin " + name_ + ": ";
  if (layer >= 0 && layer < num_layers()) where += "layer " + layers_[static_cast<size_t>(layer)].name + ": ";
  throw PluginError(where + call + ": " + (msg && msg[0] ? msg : "(no message)"));
}

const LayerInfo& Plugin::checked_layer(int32_t layer, const char* call) const {
  if (layer < 0 || layer >= num_layers())
    throw PluginError("plugin " + name_ + ": " + call + ": layer " + std::to_string(layer) + " is not in [0, " +
                      std::to_string(num_layers()) + ")");
  return layers_[static_cast<size_t>(layer)];
}

const LayerInfo& Plugin::layer(int32_t i) const { return checked_layer(i, "layer"); }

void Plugin::set_collectives(const ds_collectives* collectives) {
  if (set_collectives_ == nullptr) throw PluginError("plugin " + name_ + ": the model takes no collectives");
  if (set_collectives_(model_, collectives) != DS_OK) fail(-1, "set_collectives");
}

ds_shape Plugin::output_shape(int32_t layer, const ds_shape& input) const {
  checked_layer(layer, "output_shape");
  ds_shape out{};
  if (api_->output_shape(model_, layer, &input, &out) != DS_OK) fail(layer, "output_shape");
  return out;
}

size_t Plugin::workspace_bytes(int32_t layer, const ds_shape& input) const {
  checked_layer(layer, "workspace_bytes");
  size_t bytes = 0;
  if (api_->workspace_bytes(model_, layer, &input, &bytes) != DS_OK) fail(layer, "workspace_bytes");
  return bytes;
}

void Plugin::forward(int32_t layer, const ds_tensor* params, const ds_tensor& input, ds_tensor& output,
                     void* workspace, const ds_batch& batch) const {
  const LayerInfo& l = checked_layer(layer, "forward");
  if (params == nullptr && !l.params.empty())
    throw PluginError("plugin " + name_ + ": layer " + l.name + ": forward: no parameter tensors, the layer declares " +
                      std::to_string(l.params.size()));
  if (api_->forward(model_, layer, params, &input, &output, workspace, &batch) != DS_OK) fail(layer, "forward");
}

void Plugin::backward(int32_t layer, const ds_tensor* params, const ds_tensor& input, const ds_tensor& output,
                      const ds_tensor& grad_output, ds_tensor* grad_input, ds_tensor* grad_params, void* workspace,
                      const ds_batch& batch) const {
  const LayerInfo& l = checked_layer(layer, "backward");
  if ((params == nullptr || grad_params == nullptr) && !l.params.empty())
    throw PluginError("plugin " + name_ + ": layer " + l.name + ": backward: no parameter or gradient tensors, the "
                      "layer declares " + std::to_string(l.params.size()));
  if (api_->backward(model_, layer, params, &input, &output, &grad_output, grad_input, grad_params, workspace,
                     &batch) != DS_OK)
    fail(layer, "backward");
}

ds_dataset_info Plugin::dataset_info() const {
  ds_dataset_info info{};
  if (api_->dataset_info(model_, &info) != DS_OK) fail(-1, "dataset_info");
  return info;
}

ds_shape Plugin::predictions_shape(const ds_shape& input) const {
  ds_shape out{};
  if (describe_predictions_ == nullptr) return out;  // the model makes none
  if (describe_predictions_(model_, &input, &out) != DS_OK) fail(-1, "describe_predictions");
  return out;
}

void Plugin::get_batch(const int64_t* indices, int64_t n, ds_tensor& input, ds_tensor& target) const {
  if (get_batch_ == nullptr)
    throw PluginError("plugin " + name_ + ": get_batch: the plugin has no get_batch (it has no data of its own)");
  if (get_batch_(model_, indices, n, &input, &target) != DS_OK) fail(-1, "get_batch");
}

}  // namespace ds
