// The `gpt` model plugin: a GPT-2-style decoder (nanoGPT semantics, dropout 0, fp32), computed
// through the backend's ops (plugin/sdk/ops.h), so it runs on every backend: the CPU and CUDA.
//
//   embed: x = wte[tokens] + wpe[0..T-1]                                  tokens i32 [B, T] → [B, T, C]
//   h0..h{n_layer-1}: x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))          [B, T, C] → [B, T, C]
//       attn = c_proj(causal_self_attention(c_attn(.)))   mlp = c_proj(gelu_tanh(c_fc(.)))
//   head: logits = ln_f(x) · wteᵀ (wte TIED to embed.wte, no bias); mean cross-entropy over all
//         B·T positions against the target tokens i32 [B, T]                    [B, T, C] → [1]
// Linear weights are [out, in] (PyTorch's nn.Linear: y = x·Wᵀ + b); parameter names are nanoGPT's
// within each layer ("h0.attn.c_attn.weight", "head.ln_f.weight", ...). Init as GPT-2: Linear
// weights and embeddings normal(0, init_std), the two residual projections (attn.c_proj,
// mlp.c_proj) normal(0, init_std/√(2·n_layer)), biases zeros, LayerNorm weight ones / bias zeros.
//
// Config ("model" block, all optional): n_layer 4, n_head 4, n_embd 128, seq_len 64,
// vocab_size 256, init_std 0.02. n_embd must be a multiple of n_head. Unknown keys are errors.
// Data: none of its own (dataset_info().num_samples = 0): the engine feeds token windows from the
// config's `data` block, input i32 [seq_len], target i32 [seq_len] (the input shifted by one).
// Inputs shorter than seq_len (T ≤ seq_len) are accepted (generation); longer ones are not.
// Predictions: the logits [B, T, vocab_size].
//
// Tensor parallelism (model.tensor_parallel, set by the engine): the blocks are split as Megatron splits
// them (Block); the vocabulary too when the tensor-parallel size divides vocab_size (Megatron's
// vocabulary-parallel embedding and cross-entropy: Embed, Head), else the embedding and the tied head
// stay whole on every rank, as DeepSpeed's AutoTP leaves a tied embedding. n_head must be a multiple of
// the tensor-parallel size.
//
// Sequence parallelism (model.sequence_parallel, DeepSpeed-Ulysses): rank s of S sees positions
// [s·T, (s+1)·T) of every sequence (the embedding adds wpe from s·T); around attention each block trades its
// chunk of the sequence for a share of the heads (all-to-all), attends over the whole sequence with them,
// and trades back. n_head must be a multiple of tensor-parallel size x S, seq_len of S. The loss is the mean
// over the rank's own positions (the engine's average over the ranks makes it the batch's).
//
// Every layer keeps what backward needs in its workspace (the engine may re-run forward right
// before backward); backward's own temporaries are the backend's (ops.temp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "plugin/ds_plugin_sdk.h"

namespace {

using ds::sdk::Backward;
using ds::sdk::Forward;
using ds::sdk::Ops;
using ds::sdk::Shape;

constexpr float kLnEps = 1e-5f;  // GPT-2's LayerNorm eps

struct Dims {
  int64_t n_layer, n_head, n_embd, seq_len, vocab;
  float init_std;
  int64_t seq_ranks = 1;  // sequence parallelism: each rank sees seq_len / seq_ranks positions at most
  bool vocab_parallel = false;  // tensor parallelism: wte's rows and the logits split over the ranks
};

// Throws unless `in` is [B, T] (ndim 2, tokens) or [B, T, C] (ndim 3, activations), 1 ≤ T ≤ seq_len
// (per sequence-parallel rank: seq_len / S).
void require_input(const Shape& in, int ndim, const Dims& d) {
  const int64_t most = d.seq_len / d.seq_ranks;
  bool ok = in.ndim == ndim && in[0] >= 1 && in[1] >= 1 && in[1] <= most;
  if (ok && ndim == 3) ok = in[2] == d.n_embd;
  if (!ok)
    throw std::invalid_argument("input shape " + in.str() + ", expected " +
                                (ndim == 2 ? std::string("[B, T] tokens")
                                           : "[B, T, " + std::to_string(d.n_embd) + "] (n_embd " +
                                                 std::to_string(d.n_embd) + ")") +
                                " with 1 <= T <= " +
                                (d.seq_ranks > 1 ? "seq_len / sequence-parallel ranks " + std::to_string(most)
                                                 : "seq_len " + std::to_string(d.seq_len)));
}

// Linear on rows: y[n,out] = x[n,in]·Wᵀ + b, the product accumulated onto the bias (one pass over
// y fewer than zeroing it and adding b afterwards, as torch's addmm).
void linear_forward(const Ops& ops, const float* x, const float* W, const float* b, float* y, int64_t n, int64_t in,
                    int64_t out) {
  ops.bias_fill(y, b, n, out);
  ops.matmul(x, W, y, n, out, in, false, true, true);
}
// dx[n,in] = dy·W (overwritten; skipped when dx is null), dW += dyᵀ·x, db += Σ dy.
void linear_backward(const Ops& ops, const float* x, const float* W, const float* dy, float* dx, float* dW, float* db,
                     int64_t n, int64_t in, int64_t out) {
  if (dx != nullptr) ops.matmul(dy, W, dx, n, in, out, false, false, false);
  ops.matmul(dy, x, dW, out, in, n, true, false, true);
  ops.bias_grad(dy, db, n, out);
}

// ---- embed ---------------------------------------------------------------------------------------

// With a vocabulary split over the tensor-parallel ranks (Megatron's VocabParallelEmbedding), rank r
// holds rows [r·V/P, (r+1)·V/P) of wte: each rank looks up the tokens in its rows (0 for the others), the
// group sums the lookups, then the position embeddings are added.
class Embed : public ds::sdk::Layer {
 public:
  Embed(const Dims& d, std::shared_ptr<const ds::sdk::TensorParallel> tp,
        std::shared_ptr<const ds::sdk::SequenceParallel> sp)
      : Layer("embed"), d_(d), tp_(std::move(tp)), sp_(std::move(sp)) {
    if (d.vocab_parallel)
      add_param("wte", {d.vocab / tp_->size, d.n_embd}, DS_INIT_NORMAL, 0.0f, d.init_std, ds::sdk::Shard{0, 1});
    else
      add_param("wte", {d.vocab, d.n_embd}, DS_INIT_NORMAL, 0.0f, d.init_std);
    add_param("wpe", {d.seq_len, d.n_embd}, DS_INIT_NORMAL, 0.0f, d.init_std);
  }
  Shape output_shape(const Shape& in) const override {
    require_input(in, 2, d_);
    return {in[0], in[1], d_.n_embd};
  }
  void forward(const Forward& f) override {  // positions from this rank's first: wpe rows sp.rank·T on
    const int64_t B = f.input.dim(0), T = f.input.dim(1), C = d_.n_embd;
    const float* wpe = f.param(1).f32() + first_position(T);
    if (!d_.vocab_parallel)
      return f.ops.embedding_forward(f.input.i32(), f.param(0).f32(), wpe, f.output.f32(), B, T, C, d_.vocab);
    const int64_t rows = d_.vocab / tp_->size;
    f.ops.embedding_rows_forward(f.input.i32(), f.param(0).f32(), f.output.f32(), B * T, C, tp_->rank * rows, rows,
                                 d_.vocab);
    tp_->allreduce_sum(f.output.f32(), B * T * C);
    for (int64_t b = 0; b < B; ++b) f.ops.add_into(f.output.f32() + b * T * C, wpe, T * C);
  }
  void backward(const Backward& b) override {  // layer 0: no grad_input (the input is token ids)
    const int64_t B = b.input.dim(0), T = b.input.dim(1), C = d_.n_embd;
    float* dwpe = b.grad_param(1).f32() + first_position(T);
    if (!d_.vocab_parallel)
      return b.ops.embedding_backward(b.input.i32(), b.grad_output.f32(), b.grad_param(0).f32(), dwpe, B, T, C,
                                      d_.vocab);
    const int64_t rows = d_.vocab / tp_->size;
    b.ops.embedding_rows_backward(b.input.i32(), b.grad_output.f32(), b.grad_param(0).f32(), B * T, C,
                                  tp_->rank * rows, rows, d_.vocab);
    for (int64_t i = 0; i < B; ++i) b.ops.add_into(dwpe, b.grad_output.f32() + i * T * C, T * C);
  }

 private:
  // The offset (floats) of this rank's first position's row in wpe [seq_len, C].
  int64_t first_position(int64_t T) const { return sp_->rank * T * d_.n_embd; }
  Dims d_;
  std::shared_ptr<const ds::sdk::TensorParallel> tp_;
  std::shared_ptr<const ds::sdk::SequenceParallel> sp_;
};

// ---- transformer block ---------------------------------------------------------------------------

// With tensor parallelism over P ranks (Megatron's split): c_attn and mlp.c_fc are column-parallel
// (each rank holds the q, k and v rows of H/P heads, and 4C/P of the MLP's rows), attn.c_proj and
// mlp.c_proj row-parallel (the matching input columns; their outputs summed over the group, then the
// replicated bias added); the input gradients of the column-parallel layers are summed over the group.
// LayerNorms and the row-parallel biases are replicated: every rank computes the same values for them.
class Block : public ds::sdk::Layer {
 public:
  Block(std::string name, const Dims& d, std::shared_ptr<const ds::sdk::TensorParallel> tp,
        std::shared_ptr<const ds::sdk::SequenceParallel> sp)
      : Layer(std::move(name)), d_(d), tp_(std::move(tp)), sp_(std::move(sp)) {
    const int64_t C = d.n_embd, Cp = C / tp_->size, Fp = 4 * C / tp_->size;
    const float proj_std = d.init_std / std::sqrt(2.0f * static_cast<float>(d.n_layer));
    const ds::sdk::Shard qkv{0, 3}, rows{0, 1}, cols{1, 1};
    add_param("ln_1.weight", {C}, DS_INIT_ONES);
    add_param("ln_1.bias", {C}, DS_INIT_ZEROS);
    add_param("attn.c_attn.weight", {3 * Cp, C}, DS_INIT_NORMAL, 0.0f, d.init_std, qkv);
    add_param("attn.c_attn.bias", {3 * Cp}, DS_INIT_ZEROS, 0.0f, 0.0f, qkv);
    add_param("attn.c_proj.weight", {C, Cp}, DS_INIT_NORMAL, 0.0f, proj_std, cols);
    add_param("attn.c_proj.bias", {C}, DS_INIT_ZEROS);
    add_param("ln_2.weight", {C}, DS_INIT_ONES);
    add_param("ln_2.bias", {C}, DS_INIT_ZEROS);
    add_param("mlp.c_fc.weight", {Fp, C}, DS_INIT_NORMAL, 0.0f, d.init_std, rows);
    add_param("mlp.c_fc.bias", {Fp}, DS_INIT_ZEROS, 0.0f, 0.0f, rows);
    add_param("mlp.c_proj.weight", {C, Fp}, DS_INIT_NORMAL, 0.0f, proj_std, cols);
    add_param("mlp.c_proj.bias", {C}, DS_INIT_ZEROS);
  }
  Shape output_shape(const Shape& in) const override {
    require_input(in, 3, d_);
    return in;
  }
  size_t workspace_bytes(const Shape& in) const override {
    require_input(in, 3, d_);
    return Slots(in, d_, tp_->size).total * sizeof(float);
  }

  void forward(const Forward& f) override {
    const Shape& s = f.input.shape();
    const Slots w(s, d_, tp_->size);
    float* ws = workspace(f.workspace);
    const int64_t B = s[0], T = s[1], C = d_.n_embd, N = B * T, H = d_.n_head / tp_->size, D = d_.n_embd / d_.n_head;
    const int64_t Cp = H * D, Fp = 4 * C / tp_->size;  // this rank's attention width and MLP rows
    const float* x = f.input.f32();
    float* y = f.output.f32();
    float* x2 = ws + w.x2;
    const Ops& ops = f.ops;
    ops.layernorm_forward(x, p(f, 0), p(f, 1), ws + w.ln1, ws + w.ln1_stats, N, C, kLnEps);
    attend(ops, ws, w, p(f, 2), p(f, 3), B, T);
    row_parallel_forward(ops, ws + w.att, p(f, 4), p(f, 5), x2, N, Cp, C);
    ops.add_into(x2, x, N * C);  // x2 = x + attn(ln_1(x))
    ops.layernorm_forward(x2, p(f, 6), p(f, 7), ws + w.ln2, ws + w.ln2_stats, N, C, kLnEps);
    linear_forward(ops, ws + w.ln2, p(f, 8), p(f, 9), ws + w.fc, N, C, Fp);
    ops.gelu_forward(ws + w.fc, ws + w.gelu, N * Fp);
    row_parallel_forward(ops, ws + w.gelu, p(f, 10), p(f, 11), y, N, Fp, C);
    ops.add_into(y, x2, N * C);  // y = x2 + mlp(ln_2(x2))
  }

  void backward(const Backward& b) override {
    const Shape& s = b.input.shape();
    const Slots w(s, d_, tp_->size);
    const float* ws = workspace(b.workspace);
    const int64_t B = s[0], T = s[1], C = d_.n_embd, N = B * T, H = d_.n_head / tp_->size, D = d_.n_embd / d_.n_head;
    const int64_t Cp = H * D, Fp = 4 * C / tp_->size;
    const float* x = b.input.f32();
    const float* dy = b.grad_output.f32();
    auto g = [&](int32_t i) { return b.grad_param(i).f32(); };
    const Ops& ops = b.ops;
    const auto dx2 = ops.temp(N * C), d4 = ops.temp(N * Fp), dc = ops.temp(N * C), tmp = ops.temp(N * C),
               dqkv = ops.temp(N * 3 * Cp);
    // mlp branch: y = x2 + c_proj(gelu(c_fc(ln_2(x2))))
    linear_backward(ops, ws + w.gelu, p(b, 10), dy, d4.get(), g(10), g(11), N, Fp, C);
    ops.gelu_backward(ws + w.fc, d4.get(), d4.get(), N * Fp);
    linear_backward(ops, ws + w.ln2, p(b, 8), d4.get(), dc.get(), g(8), g(9), N, C, Fp);
    tp_->allreduce_sum(dc.get(), N * C);  // column-parallel: every rank's share of d(ln_2 output)
    ops.layernorm_backward(ws + w.x2, p(b, 6), ws + w.ln2_stats, dc.get(), tmp.get(), g(6), g(7), N, C);
    ops.add(dy, tmp.get(), dx2.get(), N * C);  // d/dx2: through the residual and the mlp branch
    // attention branch: x2 = x + c_proj(attention(c_attn(ln_1(x))))
    linear_backward(ops, ws + w.att, p(b, 4), dx2.get(), dc.get(), g(4), g(5), N, Cp, C);
    attention_backward(ops, ws, w, dc.get(), dqkv.get(), B, T);
    linear_backward(ops, ws + w.ln1, p(b, 2), dqkv.get(), dc.get(), g(2), g(3), N, C, 3 * Cp);
    tp_->allreduce_sum(dc.get(), N * C);
    ops.layernorm_backward(x, p(b, 0), ws + w.ln1_stats, dc.get(), tmp.get(), g(0), g(1), N, C);
    if (!b.grad_input.empty()) ops.add(dx2.get(), tmp.get(), b.grad_input.f32(), N * C);
  }

 private:
  // y[n,out] = Σ over the group of x[n,in]·Wᵀ (this rank's input columns), then + b (replicated). One
  // rank: linear_forward.
  void row_parallel_forward(const Ops& ops, const float* x, const float* W, const float* b, float* y, int64_t n,
                            int64_t in, int64_t out) const {
    if (tp_->size == 1) return linear_forward(ops, x, W, b, y, n, in, out);
    ops.matmul(x, W, y, n, out, in, false, true, false);
    tp_->allreduce_sum(y, n * out);
    ops.bias_add(y, b, n, out);
  }
  // Float offsets into the workspace for an input [B, T, C] on one of `ranks` tensor-parallel ranks.
  struct Slots {
    size_t ln1, ln1_stats, qkv, att, att_stats, x2, ln2, ln2_stats, fc, gelu, total;
    Slots(const Shape& s, const Dims& d, int32_t ranks) {
      const size_t B = static_cast<size_t>(s[0]), T = static_cast<size_t>(s[1]), C = static_cast<size_t>(d.n_embd);
      const size_t N = B * T, P = static_cast<size_t>(ranks), Cp = C / P;
      size_t at = 0;
      auto take = [&](size_t n) {
        const size_t here = at;
        at += (n + 3) & ~size_t{3};  // keep every slot 16-byte aligned
        return here;
      };
      ln1 = take(N * C);
      ln1_stats = take(N * 2);
      qkv = take(N * 3 * Cp);
      att = take(N * Cp);
      att_stats = take(B * static_cast<size_t>(d.n_head) / P * T * 2);  // [B, H/P, T, 2]
      x2 = take(N * C);
      ln2 = take(N * C);
      ln2_stats = take(N * 2);
      fc = take(N * 4 * Cp);
      gelu = take(N * 4 * Cp);
      total = at;
    }
  };
  // qkv = c_attn(ln_1 output), then attention of this rank's H heads over its T positions into the workspace.
  // With sequence parallelism over S ranks: of H/S heads over all S·T positions (the workspace keeps
  // q, k, v in that layout for backward); the output traded back to this rank's positions, all H heads.
  void attend(const Ops& ops, float* ws, const Slots& w, const float* W, const float* bias, int64_t B, int64_t T) const {
    const int64_t C = d_.n_embd, N = B * T, H = d_.n_head / tp_->size, D = C / d_.n_head, Cp = H * D, S = sp_->size;
    if (S == 1) {
      linear_forward(ops, ws + w.ln1, W, bias, ws + w.qkv, N, C, 3 * Cp);
      return ops.attention_forward(ws + w.qkv, ws + w.att, ws + w.att_stats, B, T, H, D);
    }
    const auto qkv = ops.temp(N * 3 * Cp), att = ops.temp(N * Cp);
    linear_forward(ops, ws + w.ln1, W, bias, qkv.get(), N, C, 3 * Cp);
    sp_->to_heads(qkv.get(), ws + w.qkv, B, T, 3 * Cp, 3);
    ops.attention_forward(ws + w.qkv, att.get(), ws + w.att_stats, B, S * T, H / S, D);
    sp_->to_sequence(att.get(), ws + w.att, B, T, Cp, 1);
  }
  // d(qkv) [B, T, 3·Cp] from d(attention output) [B, T, Cp], through the same trades as attend (one rank: with the
  // output itself, from which a fused GPU kernel forms Δ; with sequence parallelism the heads' output is not kept).
  void attention_backward(const Ops& ops, const float* ws, const Slots& w, const float* datt, float* dqkv, int64_t B,
                          int64_t T) const {
    const int64_t N = B * T, H = d_.n_head / tp_->size, D = d_.n_embd / d_.n_head, Cp = H * D, S = sp_->size;
    if (S == 1) return ops.attention_backward(ws + w.qkv, ws + w.att, ws + w.att_stats, datt, dqkv, B, T, H, D);
    const auto datt_heads = ops.temp(N * Cp), dqkv_heads = ops.temp(N * 3 * Cp);
    sp_->to_heads(datt, datt_heads.get(), B, T, Cp, 1);
    ops.attention_backward(ws + w.qkv, ws + w.att_stats, datt_heads.get(), dqkv_heads.get(), B, S * T, H / S, D);
    sp_->to_sequence(dqkv_heads.get(), dqkv, B, T, 3 * Cp, 3);
  }
  static const float* p(const ds::sdk::LayerCall& c, int32_t i) { return c.param(i).f32(); }
  static float* workspace(void* ws) {
    if (ws == nullptr) throw std::invalid_argument("workspace is NULL");
    return static_cast<float*>(ws);
  }
  Dims d_;
  std::shared_ptr<const ds::sdk::TensorParallel> tp_;
  std::shared_ptr<const ds::sdk::SequenceParallel> sp_;
};

// ---- head: ln_f, tied LM head, cross-entropy -----------------------------------------------------

// With a vocabulary split over the tensor-parallel ranks, each rank computes the logits of its classes
// (its rows of the tied wte) and the cross-entropy is Megatron's vocab_parallel_cross_entropy: the row
// max all-reduced by MAX, the label's logit and Σexp by SUM; the input gradient (a column-parallel
// product) summed over the group. Predictions are gathered from the ranks.
class Head : public ds::sdk::Layer {
 public:
  Head(const Dims& d, std::shared_ptr<const ds::sdk::TensorParallel> tp)
      : Layer("head"), d_(d), tp_(std::move(tp)), classes_(d.vocab_parallel ? d.vocab / tp_->size : d.vocab) {
    add_param("ln_f.weight", {d.n_embd}, DS_INIT_ONES);
    add_param("ln_f.bias", {d.n_embd}, DS_INIT_ZEROS);
    add_tied_param("wte", {classes_, d.n_embd}, "embed.wte");
  }
  Shape output_shape(const Shape& in) const override {
    require_input(in, 3, d_);
    return {1};
  }
  size_t workspace_bytes(const Shape& in) const override {
    require_input(in, 3, d_);
    return Slots(in, d_.n_embd, classes_).total * sizeof(float);
  }
  void forward(const Forward& f) override {
    const Shape& s = f.input.shape();
    const Slots w(s, d_.n_embd, classes_);
    float* ws = workspace(f.workspace);
    const int64_t N = s[0] * s[1], C = d_.n_embd, V = classes_;
    const Ops& ops = f.ops;
    const int32_t* labels = targets(f.batch, s);
    ops.layernorm_forward(f.input.f32(), f.param(0).f32(), f.param(1).f32(), ws + w.lnf, ws + w.lnf_stats, N, C, kLnEps);
    ops.matmul(ws + w.lnf, f.param(2).f32(), ws + w.logits, N, V, C, false, true, false);  // ln_f(x)·wteᵀ
    if (!d_.vocab_parallel) {
      ops.cross_entropy_forward(ws + w.logits, labels, N, V, ws + w.ce_stats, f.output.f32());
    } else {
      float* stats = ws + w.ce_stats;  // [3, N]: max, the label's logit, Σexp
      ops.cross_entropy_shard_max(ws + w.logits, labels, N, V, first_class(), d_.vocab, stats);
      tp_->allreduce_max(stats, N);
      ops.cross_entropy_shard_sumexp(ws + w.logits, N, V, stats);
      tp_->allreduce_sum(stats + N, 2 * N);
      ops.cross_entropy_shard_loss(stats, N, f.output.f32());
    }
    if (!f.batch.predictions.empty()) write_predictions(f, ws + w.logits);
  }
  void backward(const Backward& b) override {
    const Shape& s = b.input.shape();
    const Slots w(s, d_.n_embd, classes_);
    const float* ws = workspace(b.workspace);
    const int64_t N = s[0] * s[1], C = d_.n_embd, V = classes_;
    const Ops& ops = b.ops;
    const auto dlogits = ops.temp(N * V), dlnf = ops.temp(N * C);
    const int32_t* labels = targets(b.batch, s);
    if (!d_.vocab_parallel)
      ops.cross_entropy_backward(ws + w.logits, labels, ws + w.ce_stats, b.grad_output.f32(), N, V, dlogits.get());
    else
      ops.cross_entropy_shard_backward(ws + w.logits, labels, ws + w.ce_stats, b.grad_output.f32(), N, V,
                                       first_class(), dlogits.get());
    const float* wte = b.param(2).f32();
    ops.matmul(dlogits.get(), ws + w.lnf, b.grad_param(2).f32(), V, C, N, true, false, true);  // dwte += dLᵀ·ln_f
    ops.matmul(dlogits.get(), wte, dlnf.get(), N, C, V, false, false, false);                // dln_f = dL·wte
    if (d_.vocab_parallel) tp_->allreduce_sum(dlnf.get(), N * C);  // every rank's classes' share
    const auto unused_dx = ops.temp(b.grad_input.empty() ? N * C : 0);
    float* dx = b.grad_input.empty() ? unused_dx.get() : b.grad_input.f32();
    ops.layernorm_backward(b.input.f32(), b.param(0).f32(), ws + w.lnf_stats, dlnf.get(), dx, b.grad_param(0).f32(),
                           b.grad_param(1).f32(), N, C);
  }

 private:
  struct Slots {
    size_t lnf, lnf_stats, logits, ce_stats, total;
    Slots(const Shape& s, int64_t n_embd, int64_t classes) {
      const size_t N = static_cast<size_t>(s[0] * s[1]), C = static_cast<size_t>(n_embd);
      size_t at = 0;
      auto take = [&](size_t n) {
        const size_t here = at;
        at += (n + 3) & ~size_t{3};
        return here;
      };
      lnf = take(N * C);
      lnf_stats = take(N * 2);
      logits = take(N * static_cast<size_t>(classes));
      ce_stats = take(N * 3);
      total = at;
    }
  };
  int64_t first_class() const { return tp_->rank * classes_; }
  // The logits [B, T, vocab] into the batch's predictions; with a split vocabulary, every rank's classes.
  void write_predictions(const Forward& f, const float* logits) const {
    const Shape& s = f.input.shape();
    const int64_t N = s[0] * s[1], V = d_.vocab;
    const Shape want{s[0], s[1], V};
    if (!(f.batch.predictions.shape() == want))
      throw std::invalid_argument("predictions shape " + f.batch.predictions.shape().str() + ", expected " + want.str());
    float* out = f.batch.predictions.f32();
    if (!d_.vocab_parallel) return f.ops.copy(out, logits, static_cast<size_t>(N * V) * sizeof(float));
    const auto gathered = f.ops.temp(N * V);  // [ranks, N, classes]
    tp_->allgather(logits, gathered.get(), N * classes_);
    for (int32_t r = 0; r < tp_->size; ++r)
      for (int64_t n = 0; n < N; ++n)
        f.ops.copy(out + n * V + r * classes_, gathered.get() + (r * N + n) * classes_,
                   static_cast<size_t>(classes_) * sizeof(float));
  }
  static const int32_t* targets(const ds::sdk::Batch& batch, const Shape& in) {
    if (batch.target.empty()) throw std::invalid_argument("batch target is NULL");
    const Shape want{in[0], in[1]};
    if (!(batch.target.shape() == want))
      throw std::invalid_argument("batch target shape " + batch.target.shape().str() + ", expected " + want.str());
    return batch.target.i32();
  }
  static float* workspace(void* ws) {
    if (ws == nullptr) throw std::invalid_argument("workspace is NULL");
    return static_cast<float*>(ws);
  }
  Dims d_;
  std::shared_ptr<const ds::sdk::TensorParallel> tp_;
  int64_t classes_;  // this rank's classes: the vocabulary, or its share
};

// ---- model ---------------------------------------------------------------------------------------

Dims read_dims(ds::sdk::Config& cfg) {
  Dims d{};
  d.n_layer = cfg.get_at_least<int64_t>("n_layer", 4, 1);
  d.n_head = cfg.get_at_least<int64_t>("n_head", 4, 1);
  d.n_embd = cfg.get_at_least<int64_t>("n_embd", 128, 1);
  d.seq_len = cfg.get_at_least<int64_t>("seq_len", 64, 1);
  d.vocab = cfg.get_at_least<int64_t>("vocab_size", 256, 2);
  const double std = cfg.get<double>("init_std", 0.02);
  if (!(std > 0.0) || !std::isfinite(std))
    throw ds::sdk::ConfigError("model.init_std: " + std::to_string(std) + " is not a positive number");
  d.init_std = static_cast<float>(std);
  if (d.n_embd % d.n_head != 0)
    throw ds::sdk::ConfigError("model.n_embd: " + std::to_string(d.n_embd) + " is not a multiple of model.n_head " +
                                std::to_string(d.n_head));
  if (d.vocab > INT32_MAX) throw ds::sdk::ConfigError("model.vocab_size: " + std::to_string(d.vocab) + " is too large");
  return d;
}

class Gpt : public ds::sdk::Model {
 public:
  explicit Gpt(ds::sdk::Config& cfg) : d_(read_dims(cfg)) {
    cfg.tensor_parallel(*tensor_parallel());
    cfg.sequence_parallel(*sequence_parallel());
    const int32_t ranks = tensor_parallel()->size, seq_ranks = sequence_parallel()->size;
    if (d_.n_head % ranks != 0)
      throw ds::sdk::ConfigError("model.n_head: " + std::to_string(d_.n_head) + " heads do not split over " +
                                 std::to_string(ranks) + " tensor-parallel ranks (tensor_parallel.autotp_size)");
    if (d_.n_head % (ranks * seq_ranks) != 0)
      throw ds::sdk::ConfigError("model.n_head: " + std::to_string(d_.n_head) + " heads do not split over " +
                                 std::to_string(ranks) + " tensor-parallel x " + std::to_string(seq_ranks) +
                                 " sequence-parallel ranks (sequence_parallel_size)");
    if (d_.seq_len % seq_ranks != 0)
      throw ds::sdk::ConfigError("model.seq_len: " + std::to_string(d_.seq_len) + " positions do not split over " +
                                 std::to_string(seq_ranks) + " sequence-parallel ranks (sequence_parallel_size)");
    d_.seq_ranks = seq_ranks;
    d_.vocab_parallel = ranks > 1 && d_.vocab % ranks == 0;
    add_layer<Embed>(d_, tensor_parallel(), sequence_parallel());
    for (int64_t i = 0; i < d_.n_layer; ++i)
      add_layer<Block>("h" + std::to_string(i), d_, tensor_parallel(), sequence_parallel());
    add_layer<Head>(d_, tensor_parallel());
  }
  bool runs_on(ds_device_type) const override { return true; }  // only the backend's ops touch tensors
  ds::sdk::DatasetInfo dataset_info() const override { return {0, DS_I32, {d_.seq_len}, DS_I32, {d_.seq_len}}; }
  Shape predictions_shape(const Shape& input) const override {
    if (input.ndim != 2) throw std::invalid_argument("input shape " + input.str() + ", expected [B, T] tokens");
    return {input[0], input[1], d_.vocab};
  }
  void get_batch(std::span<const int64_t>, const ds::sdk::Tensor&, const ds::sdk::Tensor&) override {
    throw std::logic_error("the gpt model has no data of its own");
  }

 private:
  Dims d_;
};

}  // namespace

DS_PLUGIN(Gpt, "gpt")
