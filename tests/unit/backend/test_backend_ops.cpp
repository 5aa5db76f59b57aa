// Every op of the compute backend's table (plugin/ds_backend.h), table-driven in the way of ggml's
// test-backend-ops. A row of the table is one op at one shape: its inputs, its outputs, and how to run
// it forward and backward on a backend or on kernels/cpu's scalar references. For every row the driver
// checks:
//   - the reference backward against central differences of L = Σ r ⊙ y over the reference forward;
//   - on every backend (the CPU's, and the CUDA backend on the SIMT emulator): outputs and gradients
//     against the references (atol + rtol·|ref|), and a second run giving the same bits;
//   - on the CPU backend at a size above the kernels' threading thresholds: 1 and 2 threads, same bits.
// Edge cases of single kernels (NaN, ±inf, saturation, in-place use, accumulation) stay in
// tests/unit/kernels/.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "../kernels/kernel_test_util.h"
#include "../scoped_env.h"
#include "backend/backend.h"
#include "cpu/activation.h"
#include "cpu/attention.h"
#include "cpu/bias.h"
#include "cpu/convert.h"
#include "cpu/cross_entropy.h"
#include "cpu/embedding.h"
#include "cpu/gelu.h"
#include "cpu/layernorm.h"
#include "cpu/matmul.h"
#include "cpu/parallel.h"
#include "cuda/launch.h"
#include "plugin/sdk/ops.h"

namespace {

using Floats = std::vector<float>;
using ds::sdk::Ops;
using ds::test::Rng;

struct Tol {
  double atol, rtol;
};

// What an output is: part of L = Σ r ⊙ y (and compared), compared only (a layer's saved statistics),
// or scratch the backward reads (the shard statistics, which have no reference of their own).
enum class Role { Loss, Compare, Scratch };

struct Output {
  std::string name;
  size_t size;
  Role role;
};

struct Input {
  std::string name;
  Floats values;
  bool grad;  // differentiated (its gradient is checked)
};

// One op's tensors: float inputs, integer inputs (tokens, labels) and outputs, indexed as the row lists them.
struct Io {
  std::vector<Floats> in;
  std::vector<int32_t> ints;
  std::vector<Floats> out;
};

// Runs on a backend's ops, or on the references where ops is null.
using Forward = std::function<void(const Ops* ops, Io& io)>;
// dx[i] (zeroed, sized as input i; empty for inputs not differentiated) from r[j] = dL/dy_j of the Loss
// outputs (empty for the others) and the forward's outputs in io.
using Backward = std::function<void(const Ops* ops, Io& io, const std::vector<Floats>& r, std::vector<Floats>& dx)>;

struct Row {
  std::string name;
  std::vector<Input> inputs;
  std::vector<int32_t> ints;
  std::vector<Output> outputs;
  Forward forward;
  Backward backward;
  Tol out_tol, grad_tol;       // a backend against the references
  Tol fd_tol{1e-4, 1e-3};      // the reference backward against central differences (h = 1e-2)
};

Floats zeros(size_t n) { return Floats(n, 0.0f); }

Io fresh(const Row& row) {
  Io io;
  for (const Input& x : row.inputs) io.in.push_back(x.values);
  io.ints = row.ints;
  for (const Output& y : row.outputs) io.out.push_back(zeros(y.size));
  return io;
}

std::vector<Floats> zero_grads(const Row& row) {
  std::vector<Floats> dx;
  for (const Input& x : row.inputs) dx.push_back(x.grad ? zeros(x.values.size()) : Floats{});
  return dx;
}

// dy[i] for an op whose backward passes the output gradient straight through to input i.
void pass_through(const Ops* ops, const Floats& r, Floats& dx) {
  if (ops) ops->copy(dx.data(), r.data(), r.size() * sizeof(float));
  else dx = r;
}

// ---- The rows ----------------------------------------------------------------------------------
// `large` sizes put every op above parallel_for's per-thread minimum (16384 elements) for the thread
// check; the small ones keep central differences cheap and include odd sizes.

Row matmul_row(Rng& rng, bool trans_a, bool trans_b, bool accumulate, bool large) {
  const int64_t m = large ? 300 : 5, n = large ? 260 : 7, k = large ? 290 : 3;
  Row row;
  row.name = std::string("matmul ") + (trans_a ? "T" : "N") + (trans_b ? "T" : "N") + (accumulate ? " +=" : "") +
             " m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
  row.inputs = {{"a", ds::test::random_vec(rng, m * k), true}, {"b", ds::test::random_vec(rng, k * n), true}};
  if (accumulate) row.inputs.push_back({"c0", ds::test::random_vec(rng, m * n), true});
  row.outputs = {{"c", static_cast<size_t>(m * n), Role::Loss}};
  row.forward = [=](const Ops* ops, Io& io) {
    if (accumulate) io.out[0] = io.in[2];
    if (ops) ops->matmul(io.in[0].data(), io.in[1].data(), io.out[0].data(), m, n, k, trans_a, trans_b, accumulate);
    else ds::cpu::matmul_reference(io.in[0].data(), io.in[1].data(), io.out[0].data(), m, n, k, trans_a, trans_b,
                                   accumulate);
  };
  // c = op(a)·op(b): d op(a) = dc·op(b)ᵀ, d op(b) = op(a)ᵀ·dc, each stored as its operand is.
  row.backward = [=](const Ops* ops, Io& io, const std::vector<Floats>& r, std::vector<Floats>& dx) {
    auto mm = [&](const float* a, const float* b, float* c, int64_t M, int64_t N, int64_t K, bool ta, bool tb) {
      if (ops) ops->matmul(a, b, c, M, N, K, ta, tb, false);
      else ds::cpu::matmul_reference(a, b, c, M, N, K, ta, tb, false);
    };
    const float *a = io.in[0].data(), *b = io.in[1].data(), *dc = r[0].data();
    if (trans_a) mm(b, dc, dx[0].data(), k, m, n, trans_b, true);
    else mm(dc, b, dx[0].data(), m, k, n, false, !trans_b);
    if (trans_b) mm(dc, a, dx[1].data(), n, k, m, true, trans_a);
    else mm(a, dc, dx[1].data(), k, n, m, !trans_a, false);
    if (accumulate) pass_through(ops, r[0], dx[2]);
  };
  const double bound = 2e-7 * static_cast<double>(std::max({m, n, k}) + 1);
  row.out_tol = row.grad_tol = {bound, 1e-5};
  return row;
}

// y = y0 + bias (bias_add) or y = bias (bias_fill) over rows; dbias = Σ_rows dy (bias_grad).
Row bias_row(Rng& rng, bool fill, bool large) {
  const int64_t rows = large ? 700 : 7, cols = large ? 129 : 33;
  Row row;
  row.name = std::string(fill ? "bias_fill" : "bias_add") + " " + std::to_string(rows) + "x" + std::to_string(cols);
  row.inputs = {{"bias", ds::test::random_vec(rng, cols), true}};
  if (!fill) row.inputs.push_back({"y0", ds::test::random_vec(rng, rows * cols), true});
  row.outputs = {{"y", static_cast<size_t>(rows * cols), Role::Loss}};
  row.forward = [=](const Ops* ops, Io& io) {
    if (!fill) io.out[0] = io.in[1];
    if (ops && fill) ops->bias_fill(io.out[0].data(), io.in[0].data(), rows, cols);
    else if (ops) ops->bias_add(io.out[0].data(), io.in[0].data(), rows, cols);
    else if (fill) ds::cpu::bias_fill(io.out[0].data(), io.in[0].data(), rows, cols);  // copies: exact
    else ds::cpu::bias_add_reference(io.out[0].data(), io.in[0].data(), rows, cols);
  };
  row.backward = [=](const Ops* ops, Io&, const std::vector<Floats>& r, std::vector<Floats>& dx) {
    if (ops) ops->bias_grad(r[0].data(), dx[0].data(), rows, cols);
    else ds::cpu::bias_grad_reference(r[0].data(), dx[0].data(), rows, cols);
    if (!fill) pass_through(ops, r[0], dx[1]);
  };
  row.out_tol = {0.0, 0.0};  // one rounding of one addition: exact
  row.grad_tol = {2e-7 * static_cast<double>(rows + 1), 1e-6};
  return row;
}

// y = y0 + x in place (add_into) or out = a + b (add).
Row add_row(Rng& rng, bool into, bool large) {
  const int64_t n = large ? 50001 : 37;
  Row row;
  row.name = std::string(into ? "add_into" : "add") + " n=" + std::to_string(n);
  row.inputs = {{"a", ds::test::random_vec(rng, n), true}, {"b", ds::test::random_vec(rng, n), true}};
  row.outputs = {{"y", static_cast<size_t>(n), Role::Loss}};
  row.forward = [=](const Ops* ops, Io& io) {
    if (into) {
      io.out[0] = io.in[0];
      if (ops) ops->add_into(io.out[0].data(), io.in[1].data(), n);
      else for (int64_t i = 0; i < n; ++i) io.out[0][i] += io.in[1][i];
    } else if (ops) {
      ops->add(io.in[0].data(), io.in[1].data(), io.out[0].data(), n);
    } else {
      for (int64_t i = 0; i < n; ++i) io.out[0][i] = io.in[0][i] + io.in[1][i];
    }
  };
  row.backward = [](const Ops* ops, Io&, const std::vector<Floats>& r, std::vector<Floats>& dx) {
    pass_through(ops, r[0], dx[0]);
    pass_through(ops, r[0], dx[1]);
  };
  row.out_tol = row.grad_tol = {0.0, 0.0};
  return row;
}

// ReLU and GELU: y[n] = f(x[n]); ReLU's inputs keep 0.1 from the kink so x ± h stays on one side.
Row activation_row(Rng& rng, bool gelu, bool large) {
  const int64_t n = large ? 70001 : 200;
  Row row;
  row.name = std::string(gelu ? "gelu" : "relu") + " n=" + std::to_string(n);
  Floats x = ds::test::random_vec(rng, n, gelu ? -4.0f : -1.0f, gelu ? 4.0f : 1.0f);
  if (!gelu)
    for (float& v : x) v = v < 0 ? v - 0.1f : v + 0.1f;
  row.inputs = {{"x", x, true}};
  row.outputs = {{"y", static_cast<size_t>(n), Role::Loss}};
  row.forward = [=](const Ops* ops, Io& io) {
    const float* in = io.in[0].data();
    float* y = io.out[0].data();
    if (ops && gelu) ops->gelu_forward(in, y, n);
    else if (ops) ops->relu_forward(in, y, n);
    else if (gelu) ds::cpu::gelu_forward_reference(in, y, n);
    else ds::cpu::relu_forward_reference(in, y, n);
  };
  row.backward = [=](const Ops* ops, Io& io, const std::vector<Floats>& r, std::vector<Floats>& dx) {
    const float* in = io.in[0].data();
    if (ops && gelu) ops->gelu_backward(in, r[0].data(), dx[0].data(), n);
    else if (ops) ops->relu_backward(in, r[0].data(), dx[0].data(), n);
    else if (gelu) ds::cpu::gelu_backward_reference(in, r[0].data(), dx[0].data(), n);
    else ds::cpu::relu_backward_reference(in, r[0].data(), dx[0].data(), n);
  };
  // GELU's fast path uses an fp32 e^x within 2 ulp (kernels/cpu/README.md): atol 1e-7, rtol 1e-5.
  row.out_tol = row.grad_tol = gelu ? Tol{1e-7, 1e-5} : Tol{0.0, 0.0};
  row.fd_tol = gelu ? Tol{1e-4, 1e-3} : Tol{1e-5, 1e-4};
  return row;
}

// LayerNorm over the last dimension (GPT-2's eps); x in [-2, 2), gamma near 1.
Row layernorm_row(Rng& rng, bool large) {
  const int64_t rows = large ? 64 : 3, dim = large ? 768 : 7;
  constexpr float kEps = 1e-5f;
  Row row;
  row.name = "layernorm " + std::to_string(rows) + "x" + std::to_string(dim);
  row.inputs = {{"x", ds::test::random_vec(rng, rows * dim, -2.0f, 2.0f), true},
                {"gamma", ds::test::random_vec(rng, dim, 0.5f, 1.5f), true},
                {"beta", ds::test::random_vec(rng, dim), true}};
  row.outputs = {{"y", static_cast<size_t>(rows * dim), Role::Loss}, {"stats", static_cast<size_t>(2 * rows), Role::Compare}};
  row.forward = [=](const Ops* ops, Io& io) {
    const float *x = io.in[0].data(), *gamma = io.in[1].data(), *beta = io.in[2].data();
    if (ops) ops->layernorm_forward(x, gamma, beta, io.out[0].data(), io.out[1].data(), rows, dim, kEps);
    else ds::cpu::layernorm_forward_reference(x, gamma, beta, io.out[0].data(), io.out[1].data(), rows, dim, kEps);
  };
  row.backward = [=](const Ops* ops, Io& io, const std::vector<Floats>& r, std::vector<Floats>& dx) {
    const float *x = io.in[0].data(), *gamma = io.in[1].data(), *stats = io.out[1].data();
    if (ops) ops->layernorm_backward(x, gamma, stats, r[0].data(), dx[0].data(), dx[1].data(), dx[2].data(), rows, dim);
    else ds::cpu::layernorm_backward_reference(x, gamma, stats, r[0].data(), dx[0].data(), dx[1].data(), dx[2].data(),
                                               rows, dim);
  };
  // y, dx: a few fp32 roundings of O(1) values; stats one rounding of a double; dgamma, dbeta summed
  // over the rows (~1e-7 per row from the fast path's fp32 x̂).
  row.out_tol = {2e-6, 1e-5};
  row.grad_tol = {2e-6 + 2e-7 * static_cast<double>(rows), 1e-5};
  return row;
}

// Causal attention: qkv[B, T, 3, H, D] → out[B, T, H, D], stats[B, H, T, 2].
Row attention_row(Rng& rng, bool large) {
  const int64_t B = large ? 2 : 2, T = large ? 70 : 5, H = large ? 3 : 2, D = large ? 16 : 3;
  Row row;
  row.name = "attention B=" + std::to_string(B) + " T=" + std::to_string(T) + " H=" + std::to_string(H) +
             " D=" + std::to_string(D);
  row.inputs = {{"qkv", ds::test::random_vec(rng, B * T * 3 * H * D), true}};
  row.outputs = {{"out", static_cast<size_t>(B * T * H * D), Role::Loss},
                 {"stats", ds::cpu::attention_workspace_floats(B, T, H, D), Role::Compare}};
  row.forward = [=](const Ops* ops, Io& io) {
    if (ops) ops->attention_forward(io.in[0].data(), io.out[0].data(), io.out[1].data(), B, T, H, D);
    else ds::cpu::attention_forward_reference(io.in[0].data(), io.out[0].data(), io.out[1].data(), B, T, H, D);
  };
  row.backward = [=](const Ops* ops, Io& io, const std::vector<Floats>& r, std::vector<Floats>& dx) {
    if (ops)
      ops->attention_backward(io.in[0].data(), io.out[0].data(), io.out[1].data(), r[0].data(), dx[0].data(), B, T, H,
                              D);
    else ds::cpu::attention_backward_reference(io.in[0].data(), io.out[1].data(), r[0].data(), dx[0].data(), B, T, H, D);
  };
  // A score is a dot of D products scaled by 1/√D: es = 8e-7·(D+1)/√D (matmul's bound); out is a convex
  // combination of v rows: 4·es + 2e-6; gradients sum up to T products of O(1) values.
  const double es = 8e-7 * static_cast<double>(D + 1) / std::sqrt(static_cast<double>(D));
  row.out_tol = {4 * es + 2e-6, 1e-5};
  row.grad_tol = {1e-5, 1e-4};
  return row;
}

// Token + position embedding; repeated tokens, so dwte rows sum several positions.
Row embedding_row(Rng& rng, bool large) {
  const int64_t B = large ? 4 : 2, T = large ? 128 : 3, C = large ? 64 : 5, vocab = large ? 50 : 4;
  Row row;
  row.name = "embedding B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C);
  row.inputs = {{"wte", ds::test::random_vec(rng, vocab * C), true}, {"wpe", ds::test::random_vec(rng, T * C), true}};
  for (int64_t i = 0; i < B * T; ++i) row.ints.push_back(static_cast<int32_t>(rng.below(vocab)));
  row.outputs = {{"out", static_cast<size_t>(B * T * C), Role::Loss}};
  row.forward = [=](const Ops* ops, Io& io) {
    if (ops) ops->embedding_forward(io.ints.data(), io.in[0].data(), io.in[1].data(), io.out[0].data(), B, T, C, vocab);
    else ds::cpu::embedding_forward_reference(io.ints.data(), io.in[0].data(), io.in[1].data(), io.out[0].data(), B, T,
                                              C, vocab);
  };
  row.backward = [=](const Ops* ops, Io& io, const std::vector<Floats>& r, std::vector<Floats>& dx) {
    if (ops) ops->embedding_backward(io.ints.data(), r[0].data(), dx[0].data(), dx[1].data(), B, T, C, vocab);
    else ds::cpu::embedding_backward_reference(io.ints.data(), r[0].data(), dx[0].data(), dx[1].data(), B, T, C, vocab);
  };
  row.out_tol = {0.0, 0.0};
  row.grad_tol = {2e-7 * static_cast<double>(B * T + 1), 1e-6};
  return row;
}

// A cross-entropy row's inputs: logits[rows, classes] in [-3, 3) and a label per row, and the
// tolerances of its loss and gradient.
Row cross_entropy_inputs(Rng& rng, const std::string& name, int64_t rows, int64_t classes) {
  Row row;
  row.name = name + " " + std::to_string(rows) + "x" + std::to_string(classes);
  row.inputs = {{"logits", ds::test::random_vec(rng, rows * classes, -3.0f, 3.0f), true}};
  for (int64_t i = 0; i < rows; ++i) row.ints.push_back(static_cast<int32_t>(rng.below(classes)));
  row.out_tol = {1e-6, 1e-6};
  row.grad_tol = {1e-7, 1e-5};
  row.fd_tol = {3e-5, 1e-2};
  return row;
}

// Mean softmax cross-entropy of logits[rows, classes]: loss[1] and stats[rows, 2].
Row cross_entropy_row(Rng& rng, bool large) {
  const int64_t rows = large ? 40 : 4, classes = large ? 1000 : 9;
  Row row = cross_entropy_inputs(rng, "cross_entropy", rows, classes);
  row.outputs = {{"loss", 1, Role::Loss}, {"stats", static_cast<size_t>(2 * rows), Role::Compare}};
  row.forward = [=](const Ops* ops, Io& io) {
    if (ops) ops->cross_entropy_forward(io.in[0].data(), io.ints.data(), rows, classes, io.out[1].data(), io.out[0].data());
    else io.out[0][0] = ds::cpu::cross_entropy_forward_reference(io.in[0].data(), io.ints.data(), rows, classes,
                                                                 io.out[1].data());
  };
  row.backward = [=](const Ops* ops, Io& io, const std::vector<Floats>& r, std::vector<Floats>& dx) {
    if (ops) ops->cross_entropy_backward(io.in[0].data(), io.ints.data(), io.out[1].data(), r[0].data(), rows, classes,
                                         dx[0].data());
    else ds::cpu::cross_entropy_backward_reference(io.in[0].data(), io.ints.data(), io.out[1].data(), r[0][0], rows,
                                                   classes, dx[0].data());
  };
  return row;
}

// The vocabulary-parallel lookup of one shard, rows [first, first + rows) of the vocabulary: the
// shard's row of each token, 0 for tokens off the shard (reference: that definition, in loops).
Row embedding_rows_row(Rng& rng, bool large) {
  const int64_t n = large ? 400 : 6, C = large ? 96 : 5, first = 2, rows = large ? 30 : 3, vocab = large ? 40 : 7;
  Row row;
  row.name = "embedding_rows n=" + std::to_string(n) + " C=" + std::to_string(C) + " shard " +
             std::to_string(first) + "+" + std::to_string(rows) + " of " + std::to_string(vocab);
  row.inputs = {{"wte_rows", ds::test::random_vec(rng, rows * C), true}};
  for (int64_t i = 0; i < n; ++i) row.ints.push_back(static_cast<int32_t>(rng.below(vocab)));
  row.outputs = {{"out", static_cast<size_t>(n * C), Role::Loss}};
  auto in_shard = [=](int32_t token) { return token >= first && token < first + rows; };
  row.forward = [=](const Ops* ops, Io& io) {
    if (ops) return ops->embedding_rows_forward(io.ints.data(), io.in[0].data(), io.out[0].data(), n, C, first, rows, vocab);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < C; ++c)
        io.out[0][i * C + c] = in_shard(io.ints[i]) ? io.in[0][(io.ints[i] - first) * C + c] : 0.0f;
  };
  row.backward = [=](const Ops* ops, Io& io, const std::vector<Floats>& r, std::vector<Floats>& dx) {
    if (ops) return ops->embedding_rows_backward(io.ints.data(), r[0].data(), dx[0].data(), n, C, first, rows, vocab);
    for (int64_t i = 0; i < n; ++i)
      if (in_shard(io.ints[i]))
        for (int64_t c = 0; c < C; ++c) dx[0][(io.ints[i] - first) * C + c] += r[0][i * C + c];
  };
  row.out_tol = {0.0, 0.0};
  row.grad_tol = {2e-7 * static_cast<double>(n + 1), 1e-6};
  return row;
}

// The vocabulary-parallel cross-entropy's steps on one shard holding the whole vocabulary (so no
// all-reduce is needed between them): the loss and gradient of cross_entropy_forward_reference.
Row cross_entropy_shard_row(Rng& rng, bool large) {
  const int64_t n = large ? 40 : 4, classes = large ? 1000 : 9;
  Row row = cross_entropy_inputs(rng, "cross_entropy_shard (one shard)", n, classes);
  row.outputs = {{"loss", 1, Role::Loss}, {"stats", static_cast<size_t>(3 * n), Role::Scratch}};
  row.forward = [=](const Ops* ops, Io& io) {
    const float* logits = io.in[0].data();
    if (!ops) {
      Floats whole_stats(2 * n);
      io.out[0][0] = ds::cpu::cross_entropy_forward_reference(logits, io.ints.data(), n, classes, whole_stats.data());
      return;
    }
    ops->cross_entropy_shard_max(logits, io.ints.data(), n, classes, 0, classes, io.out[1].data());
    ops->cross_entropy_shard_sumexp(logits, n, classes, io.out[1].data());
    ops->cross_entropy_shard_loss(io.out[1].data(), n, io.out[0].data());
  };
  row.backward = [=](const Ops* ops, Io& io, const std::vector<Floats>& r, std::vector<Floats>& dx) {
    const float* logits = io.in[0].data();
    if (ops) return ops->cross_entropy_shard_backward(logits, io.ints.data(), io.out[1].data(), r[0].data(), n, classes,
                                                      0, dx[0].data());
    Floats whole_stats(2 * n);
    ds::cpu::cross_entropy_forward_reference(logits, io.ints.data(), n, classes, whole_stats.data());
    ds::cpu::cross_entropy_backward_reference(logits, io.ints.data(), whole_stats.data(), r[0][0], n, classes, dx[0].data());
  };
  return row;
}

std::vector<Row> table(bool large) {
  Rng rng(large ? 2024 : 7);
  std::vector<Row> rows;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) rows.push_back(matmul_row(rng, ta, tb, false, large));
  rows.push_back(matmul_row(rng, false, true, true, large));
  rows.push_back(bias_row(rng, false, large));
  rows.push_back(bias_row(rng, true, large));
  rows.push_back(add_row(rng, true, large));
  rows.push_back(add_row(rng, false, large));
  rows.push_back(activation_row(rng, false, large));
  rows.push_back(activation_row(rng, true, large));
  rows.push_back(layernorm_row(rng, large));
  rows.push_back(attention_row(rng, large));
  rows.push_back(embedding_row(rng, large));
  rows.push_back(cross_entropy_row(rng, large));
  rows.push_back(embedding_rows_row(rng, large));
  rows.push_back(cross_entropy_shard_row(rng, large));
  return rows;
}

// ---- The driver ----------------------------------------------------------------------------------

// r = dL/dy for the Loss outputs, random, fixed per row.
std::vector<Floats> loss_weights(const Row& row) {
  Rng rng(99);
  std::vector<Floats> r;
  for (const Output& y : row.outputs) r.push_back(y.role == Role::Loss ? ds::test::random_vec(rng, y.size) : Floats{});
  return r;
}

struct Result {
  Io io;
  std::vector<Floats> grads;
};

Result run(const Row& row, const Ops* ops) {
  Result res{fresh(row), zero_grads(row)};
  row.forward(ops, res.io);
  row.backward(ops, res.io, loss_weights(row), res.grads);
  return res;
}

bool same_bits(const Result& a, const Result& b) {
  for (size_t j = 0; j < a.io.out.size(); ++j)
    if (!ds::test::bit_identical(a.io.out[j], b.io.out[j])) return false;
  for (size_t i = 0; i < a.grads.size(); ++i)
    if (!ds::test::bit_identical(a.grads[i], b.grads[i])) return false;
  return true;
}

void check_against_reference(const ds_backend* backend) {
  const Ops ops(backend);
  for (const Row& row : table(false)) {
    const Result ref = run(row, nullptr), got = run(row, &ops);
    const std::string at = std::string(backend->name) + " " + row.name;
    for (size_t j = 0; j < row.outputs.size(); ++j)
      if (row.outputs[j].role != Role::Scratch)
        ds::test::check_close(at + " " + row.outputs[j].name, got.io.out[j].data(), ref.io.out[j].data(),
                              ref.io.out[j].size(), row.out_tol.atol, row.out_tol.rtol);
    for (size_t i = 0; i < row.inputs.size(); ++i)
      if (row.inputs[i].grad)
        ds::test::check_close(at + " d" + row.inputs[i].name, got.grads[i].data(), ref.grads[i].data(),
                              ref.grads[i].size(), row.grad_tol.atol, row.grad_tol.rtol);
    INFO(at);
    CHECK(same_bits(got, run(row, &ops)));  // run to run
  }
}

}  // namespace

TEST_CASE("every op's reference backward matches central differences of its reference forward") {
  for (const Row& row : table(false)) {
    const std::vector<Floats> r = loss_weights(row);
    const Result ref = run(row, nullptr);
    Io io = fresh(row);
    for (size_t i = 0; i < row.inputs.size(); ++i) {
      if (!row.inputs[i].grad) continue;
      auto loss = [&] {
        for (Floats& y : io.out) std::fill(y.begin(), y.end(), 0.0f);
        row.forward(nullptr, io);
        double sum = 0;
        for (size_t j = 0; j < row.outputs.size(); ++j)
          for (size_t e = 0; e < r[j].size(); ++e) sum += static_cast<double>(r[j][e]) * io.out[j][e];
        return sum;
      };
      const Floats fd = ds::test::central_differences(io.in[i], loss);
      ds::test::check_close(row.name + " d" + row.inputs[i].name + " vs central differences", ref.grads[i].data(),
                            fd.data(), fd.size(), row.fd_tol.atol, row.fd_tol.rtol);
    }
  }
}

TEST_CASE("every op on the CPU backend matches the reference and repeats bit for bit") {
  check_against_reference(ds::backend::cpu());
}

TEST_CASE("every op on the CUDA backend (emulated) matches the reference and repeats bit for bit") {
  ds::backend::Cuda cuda(0);
  check_against_reference(cuda.table());
}

TEST_CASE("every op on the CPU backend gives the same bits at 1 and 2 threads") {
  const int saved = ds::cpu::threads();
  const Ops ops(ds::backend::cpu());
  for (const Row& row : table(true)) {
    ds::cpu::set_threads(1);
    const Result one = run(row, &ops);
    ds::cpu::set_threads(2);
    const Result two = run(row, &ops);
    INFO(row.name);
    CHECK(same_bits(one, two));
  }
  ds::cpu::set_threads(saved);
}

// 16-bit training (a device's set_half_matmuls, the CPU's cpu(type) tables): the matmul op multiplies its
// inputs rounded to bf16 or fp16, with fp32 accumulation, in every transpose and with accumulation into c.
// The products of 16-bit values are exact in fp32, so the result is the reference product of the rounded
// inputs up to the order of the fp32 sums; it differs from the fp32 product by far more.
void check_16bit_products(const Ops& ops, ds::amp::Half type, int64_t m, int64_t n, int64_t k) {
  const bool bf16 = type == ds::amp::Half::BF16;
  CAPTURE(bf16);
  CAPTURE(m);
  CAPTURE(n);
  CAPTURE(k);
  Rng rng(31);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (bool acc : {false, true}) {
        CAPTURE(ta);
        CAPTURE(tb);
        CAPTURE(acc);
        const Floats a = ds::test::random_vec(rng, m * k), b = ds::test::random_vec(rng, k * n);
        const Floats c0 = ds::test::random_vec(rng, m * n);
        Floats a16 = a, b16 = b;
        const auto storage = bf16 ? ds::amp::Storage::BF16 : ds::amp::Storage::F16;
        ds::cpu::round_to(storage, a16.data(), a16.size());
        ds::cpu::round_to(storage, b16.data(), b16.size());
        Floats want = c0, fp32 = c0, got = c0;
        ds::cpu::matmul_reference(a16.data(), b16.data(), want.data(), m, n, k, ta, tb, acc);
        ds::cpu::matmul_reference(a.data(), b.data(), fp32.data(), m, n, k, ta, tb, acc);
        ops.matmul(a.data(), b.data(), got.data(), m, n, k, ta, tb, acc);
        ds::test::check_close("16-bit matmul", got.data(), want.data(), got.size(), 1e-6, 1e-6);
        double off = 0.0;
        for (size_t i = 0; i < got.size(); ++i) off = std::max(off, std::abs(double(got[i]) - fp32[i]));
        CHECK(off > (bf16 ? 1e-4 : 1e-5));  // the rounding (2^-9 relative in bf16, 2^-12 in fp16) shows in sums of 33-40 products
      }
    }
  }
}

// Shapes whose leading dimensions are not multiples of 8 run on operands padded with zeros (and c through a
// padded temporary): each of m, n and k misaligned alone, all three, and none.
TEST_CASE("the CUDA backend (emulated) with 16-bit matmuls multiplies the rounded inputs") {
  for (const auto type : {ds::amp::Half::BF16, ds::amp::Half::F16})
  for (const auto& [m, n, k] : {std::array<int64_t, 3>{5, 7, 33}, {8, 16, 40}, {5, 16, 40}, {8, 7, 40}, {8, 16, 33}}) {
    ds::backend::Cuda cuda(0);
    cuda.set_half_matmuls(type);
    const Ops ops(cuda.table());
    check_16bit_products(ops, type, m, n, k);
    cuda.set_half_matmuls(std::nullopt);
    Rng rng(32);
    Floats a = ds::test::random_vec(rng, m * k), b = ds::test::random_vec(rng, k * n), got(m * n), want(m * n);
    ds::cpu::matmul_reference(a.data(), b.data(), want.data(), m, n, k, false, false, false);
    ops.matmul(a.data(), b.data(), got.data(), m, n, k, false, false, false);
    ds::test::check_close("fp32 matmul again", got.data(), want.data(), got.size(), 1e-6, 1e-6);
  }
}

// The CPU's 16-bit tables differ from cpu() in their matmul op alone.
TEST_CASE("the CPU backend's bf16 and fp16 tables multiply the rounded inputs") {
  for (const auto type : {ds::amp::Half::BF16, ds::amp::Half::F16}) {
    const ds_backend* half = ds::backend::cpu(type);
    CHECK(half != ds::backend::cpu());
    CHECK((half->matmul != ds::backend::cpu()->matmul));
    CHECK((half->attention_forward == ds::backend::cpu()->attention_forward));
    const Ops ops(half);
    for (const auto& [m, n, k] : {std::array<int64_t, 3>{5, 7, 33}, {8, 16, 40}}) check_16bit_products(ops, type, m, n, k);
  }
}

// A plugin's SDK on an engine's table of version 2 (no attention_backward_with_out): attention's backward with the
// forward's output calls the op without it.
TEST_CASE("the SDK's attention backward on a backend table of version 2") {
  const int64_t B = 1, T = 9, H = 2, D = 4, n = B * T * H * D;
  Rng rng(5);
  const Floats qkv = ds::test::random_vec(rng, 3 * n), dout = ds::test::random_vec(rng, n);
  ds_backend old = *ds::backend::cpu();
  old.version = 2;
  old.attention_backward_with_out = nullptr;
  Floats out(n), stats(ds::cpu::attention_workspace_floats(B, T, H, D)), dqkv(3 * n), want(3 * n);
  const Ops ops(&old);
  ops.attention_forward(qkv.data(), out.data(), stats.data(), B, T, H, D);
  ops.attention_backward(qkv.data(), out.data(), stats.data(), dout.data(), dqkv.data(), B, T, H, D);
  ds::cpu::attention_backward(qkv.data(), stats.data(), dout.data(), want.data(), B, T, H, D);
  CHECK(dqkv == want);
}

// 16-bit attention products (set_half_matmuls): Q, K, V, dO, P and dS are rounded to bf16 or fp16
// (relative error 2^-9 or 2^-12 each) before their GEMMs, so the output and the gradients keep to a
// few roundings of the fp32 reference (bounds: 8 roundings); an error of layout or index would be of
// the order of the values themselves.
TEST_CASE("the CUDA backend (emulated) with 16-bit matmuls: attention within their rounding of the reference") {
  const int64_t B = 2, T = 37, H = 3, D = 16, n = B * T * H * D;
  Rng rng(47);
  const Floats qkv = ds::test::random_vec(rng, 3 * n), dout = ds::test::random_vec(rng, n);
  Floats ref_out(n), ref_ws(ds::cpu::attention_workspace_floats(B, T, H, D)), ref_dqkv(3 * n);
  ds::cpu::attention_forward_reference(qkv.data(), ref_out.data(), ref_ws.data(), B, T, H, D);
  ds::cpu::attention_backward_reference(qkv.data(), ref_ws.data(), dout.data(), ref_dqkv.data(), B, T, H, D);
  const auto worst = [](const Floats& got, const Floats& want) {
    double d = 0.0, top = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
      d = std::max(d, std::abs(double(got[i]) - want[i]));
      top = std::max(top, std::abs(double(want[i])));
    }
    return d / top;  // relative to the tensor's largest
  };
  Floats fused_out, fused_dqkv;  // the previous run's, with the fused kernel
  for (const char* kernel : {"fused", "gemm"}) {
    ScopedEnv env("DS_CUDA_ATTENTION", kernel);
    for (const std::optional<ds::amp::Half> products : {std::optional<ds::amp::Half>(), std::optional(ds::amp::Half::BF16),
                                                        std::optional(ds::amp::Half::F16)}) {
      CAPTURE(kernel);
      CAPTURE(products.has_value());
      CAPTURE((products == ds::amp::Half::BF16));
      ds::backend::Cuda cuda(0);
      cuda.set_half_matmuls(products);
      const Ops ops(cuda.table());
      Floats out(n), stats(ref_ws.size()), dqkv(3 * n);
      ops.attention_forward(qkv.data(), out.data(), stats.data(), B, T, H, D);
      ops.attention_backward(qkv.data(), out.data(), stats.data(), dout.data(), dqkv.data(), B, T, H, D);
      Floats dqkv_without_out(3 * n);  // the op of backend version 2 (the fused kernel's forward again, for its Δ)
      ops.attention_backward(qkv.data(), stats.data(), dout.data(), dqkv_without_out.data(), B, T, H, D);
      CHECK(dqkv_without_out == dqkv);
      const double out_error = worst(out, ref_out), grad_error = worst(dqkv, ref_dqkv);
      if (products) {
        const double rounding = *products == ds::amp::Half::BF16 ? 0x1p-9 : 0x1p-12;
        CHECK(out_error < 8 * rounding);
        CHECK(grad_error < 8 * rounding);
        CHECK(out_error > rounding / 64);  // the products did round to 16 bits
        MESSAGE("attention (", std::string(kernel), ") with 16-bit products: output ", out_error, ", gradients ", grad_error,
                " (relative to the largest)");
        if (std::string(kernel) == "fused") {
          fused_out = out;
          fused_dqkv = dqkv;
        } else {  // the two kernels round the same operands (P before or after normalising)
          CHECK(worst(fused_out, out) < 8 * rounding);
          CHECK(worst(fused_dqkv, dqkv) < 8 * rounding);
          CHECK(fused_out != out);  // they are two kernels
        }
      } else {
        CHECK(out_error < 1e-5);
        CHECK(grad_error < 1e-5);
      }
    }
  }
}

TEST_CASE("attention keeps the GEMMs by default, DS_CUDA_ATTENTION=fused picks the fused kernel for 16-bit products up to D = 128") {
  using ds::amp::Half;
  using ds::cuda::AttentionKernel;
  using ds::cuda::attention_kernel;
  ScopedEnv env("DS_CUDA_ATTENTION", nullptr);
  CHECK(attention_kernel(8, 12, 64, Half::BF16) == AttentionKernel::gemm);  // faster on an H100 (docs/benchmarks.md)
  CHECK(attention_kernel(8, 12, 64, std::nullopt) == AttentionKernel::gemm);
  env.set("DS_CUDA_ATTENTION", "gemm");
  CHECK(attention_kernel(8, 12, 64, Half::BF16) == AttentionKernel::gemm);
  env.set("DS_CUDA_ATTENTION", "fused");
  CHECK(attention_kernel(8, 12, 64, Half::BF16) == AttentionKernel::fused);
  CHECK(attention_kernel(8, 12, 64, Half::F16) == AttentionKernel::fused);
  CHECK(attention_kernel(8, 12, 64, std::nullopt) == AttentionKernel::gemm);  // fp32: no TF32 on the tensor cores
  CHECK(attention_kernel(8, 12, 80, Half::BF16) == AttentionKernel::fused);
  CHECK(attention_kernel(8, 12, 128, Half::F16) == AttentionKernel::fused);
  CHECK(attention_kernel(8, 12, 129, Half::BF16) == AttentionKernel::gemm);
  CHECK(attention_kernel(70000, 1, 64, Half::BF16) == AttentionKernel::gemm);  // more heads than gridDim.y takes
  CHECK(ds::cuda::attention_workspace_floats(8, 1024, 12, 64, Half::BF16) == 8 * 12 * 1024);  // Δ only
  env.set("DS_CUDA_ATTENTION", "flash");
  CHECK_THROWS_WITH(attention_kernel(8, 12, 64, Half::BF16), "DS_CUDA_ATTENTION='flash': expected fused or gemm");
  env.set("DS_CUDA_ATTENTION", nullptr);
  Floats qkv(3 * 160), out(160), stats(2), ws(100);
  CHECK_THROWS_WITH(ds::cuda::attention_forward(qkv.data(), out.data(), stats.data(), ws.data(), 1, 1, 1, 160, nullptr,
                                                Half::BF16, AttentionKernel::fused),
                    "attention: the fused kernel needs 16-bit products, D <= 128 and B*H <= 65535 (D=160, B*H=1)");
  CHECK_THROWS_WITH(ds::cuda::attention_forward(qkv.data(), out.data(), stats.data(), ws.data(), 1, 1, 1, 160, nullptr,
                                                std::nullopt, AttentionKernel::gemm, 2),
                    "attention: group_heads 2 is not in 1..1");
}

TEST_CASE("cuda attention: the GEMM form's heads in groups sized by a query chunk's scores, not the whole T x T") {
  using ds::cuda::attention_block_per_head;
  using ds::cuda::attention_chunk_heads;
  using ds::cuda::AttentionKernel;
  using ds::amp::Half;
  CHECK(attention_block_per_head(1024) == 256 * 1024);  // GPT-2: 4 chunks of 256 queries, the last one's 1024 keys
  CHECK(attention_block_per_head(4096) == 256 * 4096);  // 16 chunks
  CHECK(attention_block_per_head(5) == 5 * 5);          // one chunk of every query (a 16-row tile holds them)
  CHECK(attention_block_per_head(37) == 16 * 37);
  CHECK(attention_chunk_heads(8, 1024, 12) == 96);      // every head in one group: 96 x 1 MiB of scores
  CHECK(attention_chunk_heads(1, 4096, 66) == 64);      // 256 MiB of scores: 64 heads, then 2
  CHECK(attention_chunk_heads(1, 65536, 1) == 1);       // a head's chunk over 256 MiB: still one head
  const int64_t n = 8 * 1024 * 12 * 64, block = 96 * 256 * 1024;
  CHECK(ds::cuda::attention_workspace_floats(8, 1024, 12, 64, std::nullopt, AttentionKernel::gemm) == 7 * n + 2 * block);
  CHECK(ds::cuda::attention_workspace_floats(8, 1024, 12, 64, Half::BF16, AttentionKernel::gemm) ==
        7 * n + 2 * block + 2 * n + block / 2);  // 16-bit Q, K, V, dO and a block
}
