// The C++ SDK for writing a dsworker model plugin (header-only; the ABI itself is ds_plugin.h).
//
// A plugin is a Model (an ordered list of Layers plus a dataset) and one line:
//
//   struct Scale : ds::sdk::Layer {  // y = w · x, one scalar parameter
//     Scale() : Layer("scale") { add_param("w", {1}, DS_INIT_ONES); }
//     ds::sdk::Shape output_shape(const ds::sdk::Shape& in) const override { return in; }
//     void forward(const ds::sdk::Forward& f) override { ... f.ops.matmul(...) ... }
//     void backward(const ds::sdk::Backward& b) override { ... }
//   };
//   struct MyModel : ds::sdk::Model {
//     explicit MyModel(ds::sdk::Config& cfg) { int h = cfg.get<int>("hidden", 64); add_layer<Scale>(); }
//     ds::sdk::DatasetInfo dataset_info() const override { ... }
//     void get_batch(std::span<const int64_t> indices, const ds::sdk::Tensor& input,
//                    const ds::sdk::Tensor& target) override { ... }
//   };
//   DS_PLUGIN(MyModel, "mymodel")
//
// Layers compute through `f.ops` / `b.ops` (plugin/sdk/ops.h: the backend's matmul, layernorm,
// attention, ...) on the pointers they are given, which are device memory of the backend the model was
// created on; such a model says so by overriding runs_on() and then runs on the CPU and on CUDA. A
// model that reads or writes tensor memory itself (f.param(0).f32()[0]) keeps the default, CPU only:
// created on another backend, it fails with DS_UNSUPPORTED.
//
// DS_PLUGIN defines `ds_plugin_entry` and the whole C function table (plugin/sdk/table.h). Every
// call is wrapped in try/catch: an exception becomes DS_ERROR with its what() as last_error() (the
// loader adds the plugin, layer and call names; a ds::sdk::ConfigError from create() becomes
// DS_CONFIG_ERROR, a config error for dsworker); none crosses the boundary. Before calling a
// layer the SDK checks what the engine passed (parameter shapes against the declared ones, the
// output shape against output_shape(input), dtypes), so a layer can trust its arguments. Config
// keys the model never read are reported by create(), with the closest known key
// (plugin/sdk/config.h). A model's calls must not run concurrently (the engine gives each rank
// its own model). Build a plugin with cmake/DsPlugin.cmake's ds_add_model_plugin().
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "plugin/ds_plugin.h"
#include "plugin/sdk/config.h"
#include "plugin/sdk/ops.h"

namespace ds::sdk {

// ---- Shapes and tensor views -------------------------------------------------------------------

// A dense shape of 0..DS_MAX_DIMS dimensions (0 = a scalar).
struct Shape {
  int32_t ndim = 0;
  std::array<int64_t, DS_MAX_DIMS> dims{};

  Shape() = default;
  Shape(std::initializer_list<int64_t> d) {
    if (d.size() > DS_MAX_DIMS) throw std::invalid_argument("shape: more than 4 dimensions");
    for (int64_t v : d) dims[ndim++] = v;
  }
  explicit Shape(const ds_shape& s) {
    if (s.ndim < 0 || s.ndim > DS_MAX_DIMS)
      throw std::invalid_argument("shape: ndim " + std::to_string(s.ndim) + " is not in [0, 4]");
    ndim = s.ndim;
    for (int i = 0; i < ndim; ++i) dims[i] = s.dims[i];
  }
  ds_shape c() const {
    ds_shape s{};
    s.ndim = ndim;
    for (int i = 0; i < ndim; ++i) s.dims[i] = dims[i];
    return s;
  }
  int64_t operator[](int i) const {
    if (i < 0 || i >= ndim) throw std::out_of_range("shape " + str() + " has no dimension " + std::to_string(i));
    return dims[static_cast<size_t>(i)];
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= dims[i];
    return n;
  }
  // This shape with a leading batch dimension n: [n, ...].
  Shape batched(int64_t n) const {
    if (ndim >= DS_MAX_DIMS) throw std::invalid_argument("shape: no room for a batch dimension in " + str());
    Shape s;
    s.ndim = ndim + 1;
    s.dims[0] = n;
    for (int i = 0; i < ndim; ++i) s.dims[i + 1] = dims[i];
    return s;
  }
  std::string str() const {
    std::string out = "[";
    for (int i = 0; i < ndim; ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
    return out + "]";
  }
  friend bool operator==(const Shape& a, const Shape& b) {
    return a.ndim == b.ndim && std::equal(a.dims.begin(), a.dims.begin() + a.ndim, b.dims.begin());
  }
};

inline const char* dtype_name(ds_dtype t) {
  switch (t) {
    case DS_F32: return "f32";
    case DS_I32: return "i32";
    case DS_BF16: return "bf16";
    case DS_F16: return "f16";
  }
  return "unknown";
}

// A non-owning view of a ds_tensor. TensorView<true> (Tensor) hands out writable data,
// TensorView<false> (ConstTensor) read-only data. A default-constructed view is empty (null data).
template <bool Mutable>
class TensorView {
 public:
  using F32 = std::conditional_t<Mutable, float, const float>;
  using I32 = std::conditional_t<Mutable, int32_t, const int32_t>;

  TensorView() = default;
  TensorView(const ds_tensor* t, std::string_view what) : what_(what) {
    if (t == nullptr) return;
    data_ = t->data;
    dtype_ = t->dtype;
    shape_ = Shape(t->shape);
    device_ = t->device;
  }

  bool empty() const { return data_ == nullptr; }
  ds_dtype dtype() const { return dtype_; }
  ds_device_type device() const { return device_; }  // where the data lives (the model's backend's device)
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return shape_.numel(); }
  // Typed data; throws unless the tensor is present and of that dtype.
  F32* f32() const { return static_cast<F32*>(typed(DS_F32)); }
  I32* i32() const { return static_cast<I32*>(typed(DS_I32)); }

 private:
  std::conditional_t<Mutable, void, const void>* typed(ds_dtype want) const {
    if (data_ == nullptr) throw std::invalid_argument(std::string(what_) + ": tensor is missing (NULL)");
    if (dtype_ != want)
      throw std::invalid_argument(std::string(what_) + ": dtype " + dtype_name(dtype_) + ", expected " +
                                  dtype_name(want));
    return data_;
  }
  void* data_ = nullptr;
  ds_dtype dtype_ = DS_F32;
  ds_device_type device_ = DS_DEVICE_CPU;
  Shape shape_;
  std::string_view what_ = "tensor";
};
using Tensor = TensorView<true>;
using ConstTensor = TensorView<false>;

// The micro-batch every layer sees (the loss layer reads `target`).
struct Batch {
  ConstTensor input, target;
  Tensor predictions;      // empty, or where the last layer also writes its predictions (Model::predictions_shape)
  int64_t step = 0;        // optimizer step this micro-batch contributes to, from 1
  int32_t micro_step = 0;  // 0..gradient_accumulation_steps-1
};

// ---- Layers ------------------------------------------------------------------------------------

// What every layer call gets. Parameters are in declaration order (add_param order).
struct LayerCall {
  Ops ops;  // the backend the model runs on: every tensor here is its device memory
  ConstTensor input;
  void* workspace = nullptr;  // workspace_bytes(input) bytes, engine-owned, kept until backward
  Batch batch;
  int32_t num_params = 0;
  const ds_tensor* params_ = nullptr;
  ConstTensor param(int32_t i) const { return ConstTensor(at(params_, i), "param"); }

 protected:
  template <class T>
  T* at(T* p, int32_t i) const {
    if (i < 0 || i >= num_params)
      throw std::out_of_range("parameter index " + std::to_string(i) + " of " + std::to_string(num_params));
    return p + i;
  }
};

struct Forward : LayerCall {
  Tensor output;  // output_shape(input); overwrite it
};

// grad_input is OVERWRITTEN (empty for layer 0, where nothing upstream needs it); grad_param(i)
// must be ACCUMULATED into (+=).
struct Backward : LayerCall {
  ConstTensor output;       // what forward produced
  ConstTensor grad_output;  // d(total)/d(output); [1] for the loss layer
  Tensor grad_input;
  ds_tensor* grad_params_ = nullptr;
  Tensor grad_param(int32_t i) const { return Tensor(at(grad_params_, i), "grad_param"); }
};

// How a parameter is split over the tensor-parallel group (ds_shard in ds_plugin.h): along `dim`, the
// full tensor is `blocks` equal blocks, each cut in one piece per rank; dim -1 = replicated.
struct Shard {
  int32_t dim = -1;
  int32_t blocks = 1;
};

struct Param {
  std::string name;
  Shape shape;  // this rank's share when split
  ds_init_kind init;
  float a, b;
  std::string tied_to;  // "" or "<layer>.<param>" of an earlier layer (add_tied_param)
  Shard shard;
};

// Tensor parallelism (ds_plugin.h): this rank's place in its tensor-parallel group and the group's
// all-reduce. size 1 without it.
struct TensorParallel {
  int32_t rank = 0, size = 1;
  const ds_collectives* comm = nullptr;  // the engine's (set_collectives), before any layer runs
  // In place: the sum over the group. Throws when it fails.
  void allreduce_sum(float* data, int64_t n) const {
    if (size == 1) return;
    if (comm == nullptr || comm->allreduce_sum == nullptr)
      throw std::logic_error("tensor parallelism: the engine gave no collectives");
    if (comm->allreduce_sum(comm->ctx, data, n) != DS_OK) throw std::runtime_error("tensor-parallel all-reduce failed");
  }
  // In place: the maximum over the group.
  void allreduce_max(float* data, int64_t n) const {
    if (size == 1) return;
    if (comm == nullptr || comm->allreduce_max == nullptr)
      throw std::logic_error("tensor parallelism: the engine gave no collectives");
    if (comm->allreduce_max(comm->ctx, data, n) != DS_OK) throw std::runtime_error("tensor-parallel all-reduce failed");
  }
  // out[size·n]: every rank's in[0..n), rank-major.
  void allgather(const float* in, float* out, int64_t n) const {
    if (comm == nullptr || comm->allgather == nullptr)
      throw std::logic_error("tensor parallelism: the engine gave no collectives");
    if (comm->allgather(comm->ctx, in, out, n) != DS_OK) throw std::runtime_error("tensor-parallel all-gather failed");
  }
};

// Sequence parallelism (ds_plugin.h, DeepSpeed-Ulysses): this rank's place in its sequence-parallel group
// (rank s holds positions [s·T, (s+1)·T) of every sequence) and the group's all-to-alls. size 1 without it.
struct SequenceParallel {
  int32_t rank = 0, size = 1;
  const ds_collectives* comm = nullptr;  // the engine's (set_collectives), before any layer runs
  // x [B, T, K] (K: `blocks` blocks of S pieces) → y [B, S·T, K/S], piece `rank` of every block. Throws when it fails.
  void to_heads(const float* x, float* y, int64_t B, int64_t T, int64_t K, int32_t blocks) const {
    check(comm == nullptr ? nullptr : comm->seq_to_heads);
    if (comm->seq_to_heads(comm->ctx, x, y, B, T, K, blocks) != DS_OK)
      throw std::runtime_error("sequence-parallel all-to-all failed");
  }
  // The inverse: y [B, S·T, K/S] → x [B, T, K].
  void to_sequence(const float* y, float* x, int64_t B, int64_t T, int64_t K, int32_t blocks) const {
    check(comm == nullptr ? nullptr : comm->seq_to_sequence);
    if (comm->seq_to_sequence(comm->ctx, y, x, B, T, K, blocks) != DS_OK)
      throw std::runtime_error("sequence-parallel all-to-all failed");
  }

 private:
  template <class Fn>
  static void check(Fn fn) {
    if (fn == nullptr) throw std::logic_error("sequence parallelism: the engine gave no all-to-alls");
  }
};

// One layer: its name, its parameters (declared in the constructor with add_param), and the maths.
class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  const std::vector<Param>& params() const { return params_; }

  // The output shape for an input of shape `input` (throw if the input does not fit).
  virtual Shape output_shape(const Shape& input) const = 0;
  // Bytes of engine-owned scratch this layer needs from forward to backward.
  virtual size_t workspace_bytes(const Shape& /*input*/) const { return 0; }
  virtual void forward(const Forward& f) = 0;
  virtual void backward(const Backward& b) = 0;

  // The C descriptor; its pointers stay valid while the layer lives. Parameters are frozen from
  // the first call on.
  const ds_layer_desc& describe() {
    if (!frozen_) {
      c_params_.clear();
      for (const Param& p : params_)
        c_params_.push_back({p.name.c_str(), p.shape.c(), p.init, p.a, p.b, p.tied_to.empty() ? nullptr : p.tied_to.c_str()});
      desc_ = {name_.c_str(), static_cast<int32_t>(c_params_.size()), c_params_.data()};
      frozen_ = true;
    }
    return desc_;
  }

 protected:
  // Declares a parameter: init is zeros, ones, normal(mean=a, std=b) or uniform[a, b).
  // `shard`: this rank's share of a parameter split over the tensor-parallel group (`shape` is the share's).
  void add_param(std::string name, Shape shape, ds_init_kind init, float a = 0.0f, float b = 0.0f, Shard shard = {}) {
    if (frozen_) throw std::logic_error(name_ + ": add_param after the layer was described");
    for (const Param& p : params_)
      if (p.name == name) throw std::logic_error(name_ + ": duplicate parameter '" + name + "'");
    if (shape.ndim < 1) throw std::logic_error(name_ + "." + name + ": a parameter needs at least 1 dimension");
    for (int i = 0; i < shape.ndim; ++i)
      if (shape.dims[i] < 1) throw std::logic_error(name_ + "." + name + ": shape " + shape.str() + " has an empty dimension");
    if (shard.dim >= shape.ndim || shard.blocks < 1 || (shard.dim >= 0 && shape.dims[shard.dim] % shard.blocks != 0))
      throw std::logic_error(name_ + "." + name + ": bad shard of " + shape.str());
    params_.push_back({std::move(name), shape, init, a, b, "", shard});
  }
  // Declares a parameter that IS an earlier layer's parameter `owner` ("<layer>.<param>", same
  // shape): its values are that parameter's and its gradient is added to that parameter's.
  void add_tied_param(std::string name, Shape shape, std::string owner) {
    add_param(std::move(name), shape, DS_INIT_ZEROS);
    params_.back().tied_to = std::move(owner);
  }

 private:
  std::string name_;
  std::vector<Param> params_;
  std::vector<ds_param_desc> c_params_;
  ds_layer_desc desc_{};
  bool frozen_ = false;
};

// ---- Model -------------------------------------------------------------------------------------

struct DatasetInfo {
  int64_t num_samples = 0;
  ds_dtype input_dtype = DS_F32;
  Shape input_shape;  // one sample, without the batch dimension
  ds_dtype target_dtype = DS_I32;
  Shape target_shape;  // one sample; {} = a scalar per sample, so targets are [n]
};

// The model: layers in execution order (the last returns the mean loss, shape [1]) and a dataset.
// A subclass is constructed from the config: `explicit MyModel(ds::sdk::Config& cfg)`.
class Model {
 public:
  virtual ~Model() = default;
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  Layer& layer(int32_t i) const {
    if (i < 0 || static_cast<size_t>(i) >= layers_.size())
      throw std::out_of_range("layer " + std::to_string(i) + " is not in [0, " + std::to_string(layers_.size()) + ")");
    return *layers_[static_cast<size_t>(i)];
  }

  // num_samples 0: the model trains on the token corpus of the config's `data` block (see ds_plugin.h).
  virtual DatasetInfo dataset_info() const = 0;
  // Whether the model runs on `device`'s backend. The default, the CPU only, is right for a model
  // that touches tensor memory itself; a model that computes only through the ops runs anywhere.
  virtual bool runs_on(ds_device_type device) const { return device == DS_DEVICE_CPU; }
  // The last layer's predictions for an input of shape `input` (batched); {} = it makes none.
  virtual Shape predictions_shape(const Shape& /*input*/) const { return {}; }
  // Tensor parallelism, shared with the layers that split their parameters. A model that splits reads
  // it from the config in its constructor (Config::tensor_parallel); size 1 otherwise.
  const std::shared_ptr<TensorParallel>& tensor_parallel() const { return tp_; }
  // Sequence parallelism likewise (Config::sequence_parallel); size 1 otherwise.
  const std::shared_ptr<SequenceParallel>& sequence_parallel() const { return sp_; }
  // Fills input [n, *input_shape] and target [n, *target_shape] with samples indices[0..n-1]
  // (n = indices.size(); shapes and dtypes are checked before this is called).
  virtual void get_batch(std::span<const int64_t> indices, const Tensor& input, const Tensor& target) = 0;

 protected:
  template <class L, class... Args>
  L& add_layer(Args&&... args) {
    auto layer = std::make_unique<L>(std::forward<Args>(args)...);
    for (const auto& l : layers_)
      if (l->name() == layer->name()) throw std::logic_error("duplicate layer name '" + layer->name() + "'");
    L& ref = *layer;
    layers_.push_back(std::move(layer));
    return ref;
  }

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
  std::shared_ptr<TensorParallel> tp_ = std::make_shared<TensorParallel>();
  std::shared_ptr<SequenceParallel> sp_ = std::make_shared<SequenceParallel>();
};

}  // namespace ds::sdk

#include "plugin/sdk/table.h"  // the C function table DS_PLUGIN fills in

// Defines the plugin's one exported symbol for model class `ModelClass` (constructible from
// ds::sdk::Config&) under plugin name `NAME` (a string literal).
#define DS_PLUGIN(ModelClass, NAME)                                                            \
  extern "C" __attribute__((visibility("default"))) const ds_plugin_api* ds_plugin_entry(void) { \
    namespace d = ::ds::sdk::detail;                                                           \
    static const ds_plugin_api api = {                                                         \
        DS_PLUGIN_ABI_VERSION, NAME,           &d::create<ModelClass>, &d::destroy,            \
        &d::last_error,        &d::num_layers, &d::describe_layer,     &d::output_shape,       \
        &d::workspace_bytes,   &d::forward,    &d::backward,           &d::dataset_info,       \
        &d::lookup,                                                                            \
    };                                                                                         \
    return &api;                                                                               \
  }
