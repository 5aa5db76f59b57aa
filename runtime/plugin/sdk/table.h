// The C function table behind DS_PLUGIN (part of the plugin SDK; included at the end of
// ds_plugin_sdk.h, not on its own). Each entry converts arguments to SDK views, checks them against
// the layer's declarations, calls the Model / Layer, and turns any exception into DS_ERROR with
// last_error() = what(). All noexcept: nothing crosses the C boundary.
#pragma once

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

namespace ds::sdk::detail {

struct Handle {
  std::unique_ptr<Model> model;
  Ops ops;  // the backend it was created on
  std::string last_error;
};

inline void set_error(Handle* h, const char* what) noexcept {
  if (h == nullptr) return;
  try {
    h->last_error = what;
  } catch (...) {
    h->last_error.clear();  // out of memory: last_error() falls back to a fixed message
  }
}

// Runs f(model) and turns any exception into DS_ERROR + last_error = what(). (The loader adds
// the plugin, layer and call names.)
template <class F>
ds_status guard(void* model, F&& f) noexcept {
  auto* h = static_cast<Handle*>(model);
  if (h == nullptr || !h->model) return DS_ERROR;
  try {
    f(*h->model);
    return DS_OK;
  } catch (const std::exception& e) {
    set_error(h, e.what());
  } catch (...) {
    set_error(h, "unknown exception");
  }
  return DS_ERROR;
}

inline void check_batched(const Tensor& t, const Shape& per_sample, ds_dtype dtype, int64_t n, const char* what) {
  if (t.empty()) throw std::invalid_argument(std::string(what) + " is NULL");
  if (t.dtype() != dtype) throw std::invalid_argument(std::string(what) + " has the wrong dtype");
  if (!(t.shape() == per_sample.batched(n)))
    throw std::invalid_argument(std::string(what) + " shape " + t.shape().str() + ", expected " +
                                per_sample.batched(n).str());
}

// Throws unless tensor `t` lives on the backend's device.
inline void check_device(const ds_tensor& t, const Ops& ops, const std::string& what) {
  if (t.device != ops.device())
    throw std::invalid_argument(what + " is on device " + std::to_string(static_cast<int>(t.device)) +
                                ", the model runs on the " + ops.name() + " backend");
}

// Checks parameter (and gradient) tensors against the layer's declarations.
inline void check_params(const Layer& l, const ds_tensor* ts, const Ops& ops, const char* what) {
  const auto& ps = l.params();
  if (!ps.empty() && ts == nullptr) throw std::invalid_argument(std::string(what) + " is NULL");
  for (size_t i = 0; i < ps.size(); ++i) {
    const Shape s(ts[i].shape);
    if (!(s == ps[i].shape) || ts[i].dtype != DS_F32 || ts[i].data == nullptr)
      throw std::invalid_argument(std::string(what) + " " + ps[i].name + ": shape " + s.str() + ", declared " +
                                  ps[i].shape.str() + (ts[i].data ? "" : " (data NULL)"));
    check_device(ts[i], ops, std::string(what) + " " + ps[i].name);
  }
}

// Checks an output-shaped tensor against output_shape(input).
inline void check_output(const Layer& l, const ConstTensor& input, const ds_tensor* t, const Ops& ops,
                         const char* what) {
  if (input.empty()) throw std::invalid_argument("input is NULL");
  if (t == nullptr || t->data == nullptr) throw std::invalid_argument(std::string(what) + " is NULL");
  check_device(*t, ops, what);
  const Shape expect = l.output_shape(input.shape());
  const Shape got(t->shape);
  if (!(got == expect) || t->dtype != DS_F32)
    throw std::invalid_argument(std::string(what) + " shape " + got.str() + ", expected " + expect.str() +
                                " for input " + input.shape().str());
}

inline Batch make_batch(const ds_batch* b) {
  Batch out;
  if (b == nullptr) return out;
  out.input = ConstTensor(b->input, "batch input");
  out.target = ConstTensor(b->target, "batch target");
  out.predictions = Tensor(b->predictions, "batch predictions");
  out.step = b->step;
  out.micro_step = b->micro_step;
  return out;
}

template <class M>
ds_status create(const char* config_json, const ds_backend* backend, void** model, char* err, size_t err_len) noexcept {
  static_assert(std::is_base_of_v<Model, M>, "DS_PLUGIN's class must derive from ds::sdk::Model");
  auto fail = [&](const char* msg, ds_status status = DS_ERROR) {
    if (err != nullptr && err_len > 0) std::snprintf(err, err_len, "%s", msg);
    return status;
  };
  if (model == nullptr) return fail("create: model is NULL");
  *model = nullptr;
  if (backend == nullptr || backend->version < 1) return fail("create: no compute backend (or version 0)");
  try {
    Config cfg(config_json ? config_json : "{}");
    auto h = std::make_unique<Handle>();
    h->model = std::make_unique<M>(cfg);
    h->ops = Ops(backend);
    cfg.check_unknown_keys();
    if (!h->model->runs_on(backend->device))
      return fail((std::string("this model runs on the CPU only (it reads its tensors itself), not on the ") +
                   (backend->name ? backend->name : "?") + " backend")
                      .c_str(),
                  DS_UNSUPPORTED);
    if (h->model->layers().empty()) throw std::logic_error("model has no layers");
    for (const auto& l : h->model->layers()) l->describe();  // freeze parameter lists
    *model = h.release();
    return DS_OK;
  } catch (const ConfigError& e) {
    return fail(e.what(), DS_CONFIG_ERROR);
  } catch (const std::exception& e) {
    return fail(e.what());
  } catch (...) {
    return fail("unknown exception");
  }
}

inline void destroy(void* model) noexcept { delete static_cast<Handle*>(model); }

inline const char* last_error(void* model) noexcept {
  auto* h = static_cast<Handle*>(model);
  if (h == nullptr) return "model handle is NULL";
  return h->last_error.empty() ? "unknown error (no message)" : h->last_error.c_str();
}

inline int32_t num_layers(void* model) noexcept {
  auto* h = static_cast<Handle*>(model);
  return h && h->model ? static_cast<int32_t>(h->model->layers().size()) : 0;
}

inline ds_status describe_layer(void* model, int32_t layer, ds_layer_desc* out) noexcept {
  return guard(model, [&](Model& m) {
    if (out == nullptr) throw std::invalid_argument("describe_layer: out is NULL");
    *out = m.layer(layer).describe();
  });
}

inline ds_status output_shape(void* model, int32_t layer, const ds_shape* input, ds_shape* output) noexcept {
  return guard(model, [&](Model& m) {
    Layer& l = m.layer(layer);
    if (input == nullptr || output == nullptr) throw std::invalid_argument("NULL shape");
    *output = l.output_shape(Shape(*input)).c();
  });
}

inline ds_status workspace_bytes(void* model, int32_t layer, const ds_shape* input, size_t* bytes) noexcept {
  return guard(model, [&](Model& m) {
    Layer& l = m.layer(layer);
    if (input == nullptr || bytes == nullptr) throw std::invalid_argument("NULL argument");
    *bytes = l.workspace_bytes(Shape(*input));
  });
}

inline ds_status forward(void* model, int32_t layer, const ds_tensor* params, const ds_tensor* input,
                         ds_tensor* output, void* workspace, const ds_batch* batch) noexcept {
  return guard(model, [&](Model& m) {
    Layer& l = m.layer(layer);
    Forward f;
    f.ops = static_cast<Handle*>(model)->ops;
    f.input = ConstTensor(input, "input");
    if (input != nullptr) check_device(*input, f.ops, "input");
    check_params(l, params, f.ops, "parameter");
    check_output(l, f.input, output, f.ops, "output");
    f.params_ = params;
    f.num_params = static_cast<int32_t>(l.params().size());
    f.output = Tensor(output, "output");
    f.workspace = workspace;
    f.batch = make_batch(batch);
    l.forward(f);
  });
}

inline ds_status backward(void* model, int32_t layer, const ds_tensor* params, const ds_tensor* input,
                          const ds_tensor* output, const ds_tensor* grad_output, ds_tensor* grad_input,
                          ds_tensor* grad_params, void* workspace, const ds_batch* batch) noexcept {
  return guard(model, [&](Model& m) {
    Layer& l = m.layer(layer);
    Backward b;
    b.ops = static_cast<Handle*>(model)->ops;
    b.input = ConstTensor(input, "input");
    if (input != nullptr) check_device(*input, b.ops, "input");
    check_params(l, params, b.ops, "parameter");
    check_params(l, grad_params, b.ops, "gradient of");
    check_output(l, b.input, output, b.ops, "output");
    check_output(l, b.input, grad_output, b.ops, "grad_output");
    if (grad_input != nullptr) {
      check_device(*grad_input, b.ops, "grad_input");
      if (!(Shape(grad_input->shape) == b.input.shape()) || grad_input->dtype != DS_F32 || grad_input->data == nullptr)
        throw std::invalid_argument("grad_input shape " + Shape(grad_input->shape).str() + ", expected " +
                                    b.input.shape().str());
      b.grad_input = Tensor(grad_input, "grad_input");
    }
    b.params_ = params;
    b.grad_params_ = grad_params;
    b.num_params = static_cast<int32_t>(l.params().size());
    b.output = ConstTensor(output, "output");
    b.grad_output = ConstTensor(grad_output, "grad_output");
    b.workspace = workspace;
    b.batch = make_batch(batch);
    l.backward(b);
  });
}

inline ds_status dataset_info(void* model, ds_dataset_info* out) noexcept {
  return guard(model, [&](Model& m) {
    if (out == nullptr) throw std::invalid_argument("dataset_info: out is NULL");
    const DatasetInfo d = m.dataset_info();
    *out = {d.num_samples, d.input_dtype, d.input_shape.c(), d.target_dtype, d.target_shape.c()};
  });
}

inline ds_status describe_predictions(void* model, const ds_shape* input, ds_shape* out) noexcept {
  return guard(model, [&](Model& m) {
    if (input == nullptr || out == nullptr) throw std::invalid_argument("describe_predictions: NULL argument");
    *out = m.predictions_shape(Shape(*input)).c();
  });
}

inline ds_status get_batch(void* model, const int64_t* indices, int64_t n, ds_tensor* input,
                           ds_tensor* target) noexcept {
  return guard(model, [&](Model& m) {
    if (n < 0 || (n > 0 && indices == nullptr)) throw std::invalid_argument("get_batch: bad index list");
    const DatasetInfo d = m.dataset_info();
    for (int64_t i = 0; i < n; ++i)
      if (indices[i] < 0 || indices[i] >= d.num_samples)
        throw std::out_of_range("get_batch: sample index " + std::to_string(indices[i]) + " is not in [0, " +
                                std::to_string(d.num_samples) + ")");
    const Tensor in(input, "get_batch input"), tg(target, "get_batch target");
    check_batched(in, d.input_shape, d.input_dtype, n, "get_batch input");
    check_batched(tg, d.target_shape, d.target_dtype, n, "get_batch target");
    m.get_batch(std::span<const int64_t>(indices, static_cast<size_t>(n)), in, tg);
  });
}

inline ds_status describe_shard(void* model, int32_t layer, int32_t param, ds_shard* out) noexcept {
  return guard(model, [&](Model& m) {
    if (out == nullptr) throw std::invalid_argument("describe_shard: out is NULL");
    const auto& params = m.layer(layer).params();
    if (param < 0 || static_cast<size_t>(param) >= params.size())
      throw std::out_of_range("describe_shard: parameter " + std::to_string(param) + " is not in the layer");
    const Shard& s = params[static_cast<size_t>(param)].shard;
    *out = {s.dim, s.blocks};
  });
}

inline ds_status set_collectives(void* model, const ds_collectives* collectives) noexcept {
  return guard(model, [&](Model& m) {
    if (collectives == nullptr) throw std::invalid_argument("set_collectives: NULL");
    if (m.tensor_parallel()->size > 1 &&
        (collectives->allreduce_sum == nullptr || collectives->allreduce_max == nullptr || collectives->allgather == nullptr))
      throw std::invalid_argument("set_collectives: no all-reduces or all-gather for tensor parallelism");
    if (m.sequence_parallel()->size > 1 && (collectives->seq_to_heads == nullptr || collectives->seq_to_sequence == nullptr))
      throw std::invalid_argument("set_collectives: no all-to-alls for sequence parallelism");
    m.tensor_parallel()->comm = collectives;
    m.sequence_parallel()->comm = collectives;
  });
}

// The optional functions (ds_plugin.h): every SDK model has them all.
inline ds_fn lookup(const char* name) noexcept {
  if (name == nullptr) return nullptr;
  if (std::strcmp(name, "describe_predictions") == 0) return reinterpret_cast<ds_fn>(&describe_predictions);
  if (std::strcmp(name, "get_batch") == 0) return reinterpret_cast<ds_fn>(&get_batch);
  if (std::strcmp(name, "describe_shard") == 0) return reinterpret_cast<ds_fn>(&describe_shard);
  if (std::strcmp(name, "set_collectives") == 0) return reinterpret_cast<ds_fn>(&set_collectives);
  return nullptr;
}

}  // namespace ds::sdk::detail
