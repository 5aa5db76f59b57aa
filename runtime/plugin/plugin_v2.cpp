// ABI-2 plugins behind a version-3 table (plugin_v2.h): handles, tensor conversion, the entries.
#include "plugin/plugin_v2.h"

#include <cstdio>
#include <cstring>
#include <new>
#include <vector>

#include "plugin/table_check.h"

namespace ds::plugin_v2 {
namespace {

struct Handle {
  const ds_plugin_api_v2* api;
  void* model;
  std::vector<ds_tensor_v2> params, grads;  // one layer call's converted arrays
};

Handle& handle(void* model) { return *static_cast<Handle*>(model); }

ds_tensor_v2 v2(const ds_tensor& t) { return {t.data, t.dtype, t.shape}; }

// `out` = the n version-2 tensors of ts (nullptr when ts is).
ds_tensor_v2* convert(const ds_tensor* ts, int32_t n, std::vector<ds_tensor_v2>& out) {
  if (ts == nullptr) return nullptr;
  out.clear();
  for (int32_t i = 0; i < n; ++i) out.push_back(v2(ts[i]));
  return out.data();
}

// The number of parameter tensors of `layer` (0 when the plugin cannot say).
int32_t num_params(Handle& h, int32_t layer) {
  ds_layer_desc d{};
  return h.api->describe_layer(h.model, layer, &d) == DS_OK && d.num_params > 0 ? d.num_params : 0;
}

void destroy(void* model) {
  Handle* h = static_cast<Handle*>(model);
  h->api->destroy(h->model);
  delete h;
}
const char* last_error(void* model) { return handle(model).api->last_error(handle(model).model); }
int32_t num_layers(void* model) { return handle(model).api->num_layers(handle(model).model); }
ds_status describe_layer(void* model, int32_t layer, ds_layer_desc* out) {
  return handle(model).api->describe_layer(handle(model).model, layer, out);
}
ds_status output_shape(void* model, int32_t layer, const ds_shape* input, ds_shape* output) {
  return handle(model).api->output_shape(handle(model).model, layer, input, output);
}
ds_status workspace_bytes(void* model, int32_t layer, const ds_shape* input, size_t* bytes) {
  return handle(model).api->workspace_bytes(handle(model).model, layer, input, bytes);
}

// The batch in version 2 (its tensors kept in `keep`: input, target, predictions).
ds_batch_v2 batch_v2(const ds_batch* b, ds_tensor_v2 (&keep)[3]) {
  if (b == nullptr) return {};
  ds_batch_v2 out{nullptr, nullptr, b->step, b->micro_step, nullptr};
  if (b->input) out.input = &(keep[0] = v2(*b->input));
  if (b->target) out.target = &(keep[1] = v2(*b->target));
  if (b->predictions) out.predictions = &(keep[2] = v2(*b->predictions));
  return out;
}

ds_status forward(void* model, int32_t layer, const ds_tensor* params, const ds_tensor* input, ds_tensor* output,
                  void* workspace, const ds_batch* batch) {
  Handle& h = handle(model);
  try {
    ds_tensor_v2 keep[3], in{}, out{};
    const ds_batch_v2 b = batch_v2(batch, keep);
    if (input) in = v2(*input);
    if (output) out = v2(*output);
    return h.api->forward(h.model, layer, convert(params, num_params(h, layer), h.params), input ? &in : nullptr,
                          output ? &out : nullptr, workspace, batch ? &b : nullptr);
  } catch (const std::bad_alloc&) {
    return DS_OUT_OF_MEMORY;
  }
}

ds_status backward(void* model, int32_t layer, const ds_tensor* params, const ds_tensor* input,
                   const ds_tensor* output, const ds_tensor* grad_output, ds_tensor* grad_input,
                   ds_tensor* grad_params, void* workspace, const ds_batch* batch) {
  Handle& h = handle(model);
  try {
    ds_tensor_v2 keep[3], in{}, out{}, dout{}, din{};
    const ds_batch_v2 b = batch_v2(batch, keep);
    if (input) in = v2(*input);
    if (output) out = v2(*output);
    if (grad_output) dout = v2(*grad_output);
    if (grad_input) din = v2(*grad_input);
    const int32_t n = num_params(h, layer);
    return h.api->backward(h.model, layer, convert(params, n, h.params), input ? &in : nullptr,
                           output ? &out : nullptr, grad_output ? &dout : nullptr, grad_input ? &din : nullptr,
                           convert(grad_params, n, h.grads), workspace, batch ? &b : nullptr);
  } catch (const std::bad_alloc&) {
    return DS_OUT_OF_MEMORY;
  }
}

ds_status dataset_info(void* model, ds_dataset_info* out) {
  return handle(model).api->dataset_info(handle(model).model, out);
}
ds_status describe_predictions(void* model, const ds_shape* input, ds_shape* predictions) {
  return handle(model).api->describe_predictions(handle(model).model, input, predictions);
}
ds_status get_batch(void* model, const int64_t* indices, int64_t n, ds_tensor* input, ds_tensor* target) {
  ds_tensor_v2 in{}, tg{};
  if (input) in = v2(*input);
  if (target) tg = v2(*target);
  return handle(model).api->get_batch(handle(model).model, indices, n, input ? &in : nullptr, target ? &tg : nullptr);
}

ds_fn lookup(const char* name) {
  if (name == nullptr) return nullptr;
  if (std::strcmp(name, "describe_predictions") == 0) return reinterpret_cast<ds_fn>(&describe_predictions);
  if (std::strcmp(name, "get_batch") == 0) return reinterpret_cast<ds_fn>(&get_batch);
  return nullptr;
}

const ds_plugin_api kTable = {
    DS_PLUGIN_ABI_VERSION, "(abi 2)", nullptr, destroy, last_error, num_layers, describe_layer, output_shape,
    workspace_bytes, forward, backward, dataset_info, lookup,
};

}  // namespace

std::string missing_entry(const ds_plugin_api_v2& a) {
  return plugin_table::first_missing(a, {{"get_batch", a.get_batch != nullptr},
                                         {"describe_predictions", a.describe_predictions != nullptr}});
}

ds_status create(const ds_plugin_api_v2& api, const char* config_json, const ds_backend* backend, void** model,
                 char* err, size_t err_len) {
  *model = nullptr;
  if (backend == nullptr || backend->device != DS_DEVICE_CPU) {
    std::snprintf(err, err_len, "an ABI-2 plugin runs on the CPU only, not on the %s backend",
                  backend && backend->name ? backend->name : "?");
    return DS_UNSUPPORTED;
  }
  void* inner = nullptr;
  const ds_status st = api.create(config_json, &inner, err, err_len);
  if (st != DS_OK || inner == nullptr) return st == DS_OK ? DS_ERROR : st;
  Handle* h = new (std::nothrow) Handle{&api, inner, {}, {}};
  if (h == nullptr) {
    api.destroy(inner);
    std::snprintf(err, err_len, "out of memory");
    return DS_OUT_OF_MEMORY;
  }
  *model = h;
  return DS_OK;
}

const ds_plugin_api& table() { return kTable; }

}  // namespace ds::plugin_v2
