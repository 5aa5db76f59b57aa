// A minimal stand-in for the training engine, for the plugin tests: owns parameter, gradient,
// activation and workspace buffers for a loaded Plugin, initialises parameters from their
// descriptors with a fixed PRNG, and runs forward / backward over all layers in order.
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plugin/plugin.h"

namespace ds::test {

inline uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline ds_tensor tensor(void* data, ds_dtype dtype, const ds_shape& shape) { return ds_tensor{data, dtype, shape, DS_DEVICE_CPU}; }

inline ds_shape shape_of(std::initializer_list<int64_t> dims) {
  ds_shape s{};
  for (int64_t d : dims) s.dims[s.ndim++] = d;
  return s;
}

// Tensors are tagged with the plugin's backend's device: the tests run it on the CPU backend and on
// the emulated CUDA backend, whose device memory is host memory.
class MiniEngine {
 public:
  MiniEngine(ds::Plugin& p, uint64_t seed) : p_(p) {
    uint64_t rng = seed;
    for (const ds::LayerInfo& l : p.layers()) {
      auto& ps = params.emplace_back();
      auto& gs = grads.emplace_back();
      for (const ds::ParamInfo& d : l.params) {
        std::vector<float> v(static_cast<size_t>(d.numel()));
        for (float& x : v) {
          const float u = static_cast<float>(splitmix64(rng) >> 40) / 16777216.0f;
          x = d.init == DS_INIT_ZEROS ? 0.0f : d.init == DS_INIT_ONES ? 1.0f
              : d.init == DS_INIT_UNIFORM ? d.a + (d.b - d.a) * u
                                          : d.a + d.b * (2.0f * u - 1.0f) * 1.7320508f;  // unit variance
        }
        ps.push_back(std::move(v));
        gs.emplace_back(ps.back().size(), 0.0f);
      }
    }
  }

  // Loads samples `idx` and runs every layer forward; returns the loss.
  float forward(const std::vector<int64_t>& idx, int64_t step = 1) {
    const ds_dataset_info info = p_.dataset_info();
    const int64_t n = static_cast<int64_t>(idx.size());
    input.assign(static_cast<size_t>(n * ds::shape_numel(info.input_shape)), 0.0f);
    target.assign(static_cast<size_t>(n * ds::shape_numel(info.target_shape)), 0);
    in_t = on_device(input.data(), DS_F32, batched(info.input_shape, n));
    tg_t = on_device(target.data(), DS_I32, batched(info.target_shape, n));
    p_.get_batch(idx.data(), n, in_t, tg_t);
    return run_forward(step);
  }

  // Re-runs forward on the current batch (after a parameter was changed).
  float run_forward(int64_t step = 1) {
    batch = ds_batch{&in_t, &tg_t, step, 0, nullptr};
    const int32_t L = p_.num_layers();
    acts.assign(static_cast<size_t>(L + 1), {});
    shapes.assign(static_cast<size_t>(L + 1), {});
    ws.assign(static_cast<size_t>(L), {});
    acts[0] = input;
    shapes[0] = in_t.shape;
    for (int32_t i = 0; i < L; ++i) {
      shapes[i + 1] = p_.output_shape(i, shapes[i]);
      acts[i + 1].assign(static_cast<size_t>(ds::shape_numel(shapes[i + 1])), 0.0f);
      ws[i].assign(p_.workspace_bytes(i, shapes[i]), 0);
      const auto pt = param_tensors(params[i], i);
      ds_tensor x = on_device(acts[i].data(), DS_F32, shapes[i]);
      ds_tensor y = on_device(acts[i + 1].data(), DS_F32, shapes[i + 1]);
      p_.forward(i, pt.data(), x, y, ws[i].data(), batch);
    }
    return acts[L][0];
  }

  // Backward through every layer with d(total)/d(loss) = g; gradients accumulate into `grads`.
  void backward(float g = 1.0f) {
    const int32_t L = p_.num_layers();
    std::vector<float> dy{g};
    for (int32_t i = L - 1; i >= 0; --i) {
      std::vector<float> dx(i > 0 ? acts[i].size() : 0);
      const auto pt = param_tensors(params[i], i);
      auto gt = param_tensors(grads[i], i);
      ds_tensor x = on_device(acts[i].data(), DS_F32, shapes[i]);
      ds_tensor y = on_device(acts[i + 1].data(), DS_F32, shapes[i + 1]);
      ds_tensor gy = on_device(dy.data(), DS_F32, shapes[i + 1]);
      ds_tensor gx = on_device(dx.data(), DS_F32, shapes[i]);
      p_.backward(i, pt.data(), x, y, gy, i > 0 ? &gx : nullptr, gt.data(), ws[i].data(), batch);
      dy = std::move(dx);
    }
  }

  void zero_grads() {
    for (auto& l : grads)
      for (auto& g : l) std::fill(g.begin(), g.end(), 0.0f);
  }

  std::vector<std::vector<std::vector<float>>> params, grads;  // [layer][param][element]
  std::vector<std::vector<float>> acts;                        // acts[i] = input of layer i
  std::vector<float> input;
  std::vector<int32_t> target;

 private:
  ds_tensor on_device(void* data, ds_dtype dtype, const ds_shape& shape) const {
    ds_tensor t = tensor(data, dtype, shape);
    t.device = p_.backend().device;
    return t;
  }
  static ds_shape batched(const ds_shape& s, int64_t n) {
    ds_shape out{};
    out.ndim = s.ndim + 1;
    out.dims[0] = n;
    for (int i = 0; i < s.ndim; ++i) out.dims[i + 1] = s.dims[i];
    return out;
  }
  std::vector<ds_tensor> param_tensors(std::vector<std::vector<float>>& bufs, int32_t layer) {
    std::vector<ds_tensor> out;
    const auto& descs = p_.layer(layer).params;
    for (size_t j = 0; j < descs.size(); ++j) out.push_back(on_device(bufs[j].data(), DS_F32, descs[j].shape));
    return out;
  }

  ds::Plugin& p_;
  ds_tensor in_t{}, tg_t{};
  ds_batch batch{};
  std::vector<ds_shape> shapes;
  std::vector<std::vector<unsigned char>> ws;
};

inline std::string mlp_path() { return std::string(DS_TEST_PLUGIN_DIR) + "/libds_model_mlp.so"; }
inline std::string fixture(const std::string& file) { return std::string(DS_TEST_FIXTURE_DIR) + "/" + file; }

}  // namespace ds::test
