/* The compute backend a model plugin calls (part of the plugin ABI, since ABI 3; C).
 *
 * The engine creates a plugin's model on one backend (the CPU, or one CUDA device) and hands it this
 * table. Every tensor a layer receives lives on that backend's device (ds_tensor.device), so a layer
 * computes by calling these ops on the pointers it is given, never by touching the memory itself:
 * written once against this table, a plugin runs on every backend. (A plugin that reads its tensors
 * directly runs on the CPU only; its model says so, see ds_plugin.h.)
 *
 * Conventions. `ctx` is the table's own ctx. Pointers are device memory of this backend; matrices are
 * dense and row-major; sizes are element counts (>= 0). Every op is asynchronous on the backend's one
 * stream (the CPU's ops are done on return): a later op sees an earlier one's results, the engine
 * waits for the device where it must. Outputs are OVERWRITTEN unless the op says it accumulates (+=).
 * An op returns DS_OK, DS_ERROR (last_error(ctx) says why), DS_OUT_OF_MEMORY, or DS_UNSUPPORTED.
 * Floating tensors are fp32 in this version; ops on other dtypes will be appended (the table only
 * grows: a plugin checks `version` before using an op added after version 1). Version 2 added the
 * vocabulary-parallel ops, version 3 attention_backward_with_out.
 * The formulas are kernels/cpu's (layernorm.h, attention.h, cross_entropy.h, ...) on every backend.
 */
#ifndef DS_BACKEND_H
#define DS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DS_BACKEND_VERSION 3u

typedef enum { DS_DEVICE_CPU = 0, DS_DEVICE_CUDA = 1 } ds_device_type;

/* The status codes of the plugin ABI (ds_plugin.h) and of the ops.
 * DS_CONFIG_ERROR: create() found the config's "model" block wrong (an unknown key, a bad value); the
 * loader reports it as a config error (dsworker exits 2), any other failure as a plugin error (1).
 * DS_UNSUPPORTED: the call is well formed but not possible here (a model that runs on the CPU only,
 * created on a CUDA backend; an op the backend lacks). DS_OUT_OF_MEMORY: an allocation failed. */
typedef enum { DS_OK = 0, DS_ERROR = 1, DS_CONFIG_ERROR = 2, DS_UNSUPPORTED = 3, DS_OUT_OF_MEMORY = 4 } ds_status;

typedef struct ds_backend {
  uint32_t version;      /* DS_BACKEND_VERSION of the engine that filled it */
  const char* name;      /* "cpu", "cuda" */
  ds_device_type device; /* where every tensor of this backend lives */
  void* ctx;
  const char* (*last_error)(void* ctx); /* the message of the last op that did not return DS_OK */

  /* Memory for one call's temporaries: valid until free(), which must come before the layer call
   * returns (the memory is reused by later calls). Contents undefined. 256-byte aligned. */
  ds_status (*alloc)(void* ctx, size_t bytes, void** out);
  void (*free)(void* ctx, void* p);
  /* dst[bytes] = src[bytes], both on the device, not overlapping. */
  ds_status (*copy)(void* ctx, void* dst, const void* src, size_t bytes);

  /* c[m, n] = op(a)[m, k] · op(b)[k, n] (accumulate: c +=); op(a) = aᵀ when trans_a (a stored
   * [k, m]), op(b) = bᵀ when trans_b (b stored [n, k]). fp32 accumulation, never TF32. */
  ds_status (*matmul)(void* ctx, const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k,
                      int32_t trans_a, int32_t trans_b, int32_t accumulate);
  /* y[r, c] = bias[c] (fill) or y[r, c] += bias[c] (add); dbias[c] += Σ_r dy[r, c]. */
  ds_status (*bias_fill)(void* ctx, float* y, const float* bias, int64_t rows, int64_t cols);
  ds_status (*bias_add)(void* ctx, float* y, const float* bias, int64_t rows, int64_t cols);
  ds_status (*bias_grad)(void* ctx, const float* dy, float* dbias, int64_t rows, int64_t cols);
  /* y[i] += x[i];  out[i] = a[i] + b[i]. */
  ds_status (*add_into)(void* ctx, float* y, const float* x, int64_t n);
  ds_status (*add)(void* ctx, const float* a, const float* b, float* out, int64_t n);
  /* LayerNorm over the last dimension: y[rows, dim], stats[rows, 2] (kept for backward); backward:
   * dx (overwritten), dgamma and dbeta (accumulated). */
  ds_status (*layernorm_forward)(void* ctx, const float* x, const float* gamma, const float* beta, float* y,
                                 float* stats, int64_t rows, int64_t dim, float eps);
  ds_status (*layernorm_backward)(void* ctx, const float* x, const float* gamma, const float* stats, const float* dy,
                                  float* dx, float* dgamma, float* dbeta, int64_t rows, int64_t dim);
  /* GELU (tanh approximation) and ReLU: y[n] from x[n]; dx[n] from x[n] and dy[n] (in place allowed). */
  ds_status (*gelu_forward)(void* ctx, const float* x, float* y, int64_t n);
  ds_status (*gelu_backward)(void* ctx, const float* x, const float* dy, float* dx, int64_t n);
  ds_status (*relu_forward)(void* ctx, const float* x, float* y, int64_t n);
  ds_status (*relu_backward)(void* ctx, const float* x, const float* dy, float* dx, int64_t n);
  /* Causal self-attention: out[B, T, H, D] and stats[B, H, T, 2] (kept for backward) from
   * qkv[B, T, 3, H, D]; backward: dqkv[B, T, 3, H, D] from qkv, stats and dout[B, T, H, D]. */
  ds_status (*attention_forward)(void* ctx, const float* qkv, float* out, float* stats, int64_t B, int64_t T,
                                 int64_t H, int64_t D);
  ds_status (*attention_backward)(void* ctx, const float* qkv, const float* stats, const float* dout, float* dqkv,
                                  int64_t B, int64_t T, int64_t H, int64_t D);
  /* out[B, T, C] = wte[tokens[b, t]] + wpe[t]; backward accumulates dwte[vocab, C] and dwpe[T, C]. */
  ds_status (*embedding_forward)(void* ctx, const int32_t* tokens, const float* wte, const float* wpe, float* out,
                                 int64_t B, int64_t T, int64_t C, int64_t vocab);
  ds_status (*embedding_backward)(void* ctx, const int32_t* tokens, const float* dout, float* dwte, float* dwpe,
                                  int64_t B, int64_t T, int64_t C, int64_t vocab);
  /* Mean softmax cross-entropy of logits[rows, classes] against labels[rows]: loss[1] (on the device)
   * and stats[rows, 2] (kept for backward); backward: dlogits = d(loss)/d(logits) · dloss[0]. */
  ds_status (*cross_entropy_forward)(void* ctx, const float* logits, const int32_t* labels, int64_t rows,
                                     int64_t classes, float* stats, float* loss);
  ds_status (*cross_entropy_backward)(void* ctx, const float* logits, const int32_t* labels, const float* stats,
                                      const float* dloss, int64_t rows, int64_t classes, float* dlogits);

  /* Since version 2: the vocabulary-parallel embedding and cross-entropy of tensor parallelism
   * (kernels/cpu/vocab_parallel.h). This rank holds classes [first, first + rows or classes) of a
   * vocabulary of `vocab`. Embedding: out[n, C] = the shard's row of each token, 0 for tokens off the
   * shard (summed over the group: the lookup); backward accumulates dwte_rows. Cross-entropy, stats [3, n]:
   * shard_max writes the shard's row max and the label's logit (0 off the shard), which the group
   * all-reduces by MAX and SUM; shard_sumexp the row's Σ exp(logit − max), all-reduced by SUM; shard_loss
   * the mean loss[1]; backward dlogits = (softmax − one-hot) · dloss[0] / n. */
  ds_status (*embedding_rows_forward)(void* ctx, const int32_t* tokens, const float* wte_rows, float* out, int64_t n,
                                      int64_t C, int64_t first, int64_t rows, int64_t vocab);
  ds_status (*embedding_rows_backward)(void* ctx, const int32_t* tokens, const float* dout, float* dwte_rows,
                                       int64_t n, int64_t C, int64_t first, int64_t rows, int64_t vocab);
  ds_status (*cross_entropy_shard_max)(void* ctx, const float* logits, const int32_t* labels, int64_t n,
                                       int64_t classes, int64_t first, int64_t vocab, float* stats);
  ds_status (*cross_entropy_shard_sumexp)(void* ctx, const float* logits, int64_t n, int64_t classes, float* stats);
  ds_status (*cross_entropy_shard_loss)(void* ctx, const float* stats, int64_t n, float* loss);
  ds_status (*cross_entropy_shard_backward)(void* ctx, const float* logits, const int32_t* labels, const float* stats,
                                            const float* dloss, int64_t n, int64_t classes, int64_t first,
                                            float* dlogits);

  /* Since version 3: attention_backward given also the forward's out[B, T, H, D], which lets a backend form
   * Δ_t = Σ_d dout·out per row (FlashAttention-2's) instead of from the scores; the same result. */
  ds_status (*attention_backward_with_out)(void* ctx, const float* qkv, const float* out, const float* stats,
                                           const float* dout, float* dqkv, int64_t B, int64_t T, int64_t H, int64_t D);
} ds_backend;

#ifdef __cplusplus
}
#endif
#endif /* DS_BACKEND_H */
