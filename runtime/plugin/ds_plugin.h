/* The dsworker model-plugin ABI (C, versioned).
 *
 * A plugin is a shared library exporting one function, `ds_plugin_entry`, that returns a table of
 * function pointers (ds_plugin_api) whose first field is its ABI version. The loader accepts this
 * version (3) and version 2 (ds_plugin_v2.h, adapted: such a plugin runs on the CPU), and refuses any
 * other. No C++ exception crosses this boundary: every call returns a ds_status, and on an error
 * `last_error(model)` says what went wrong (the SDK in ds_plugin_sdk.h does this for you).
 *
 * The model is an ordered list of layers. Each layer declares its parameters (name, shape, init);
 * the ENGINE owns all parameter, gradient, activation and workspace memory, allocates it, initialises
 * the parameters (with its own seeded RNG, so initial weights do not depend on the world size), and
 * calls the layers in order. Layer i's output is layer i+1's input; the last layer returns the loss:
 * a tensor of shape [1] holding the mean loss over the micro-batch.
 *
 * Backends (since ABI 3): create() receives the compute backend (ds_backend.h) the model runs on,
 * the CPU or one CUDA device. Every tensor the engine passes (parameters, activations, gradients,
 * workspace, the batch) is in that backend's device memory, and layers compute by calling the
 * backend's ops. A model that cannot run on the backend it is given (one that reads tensor memory
 * itself, so runs on the CPU only) returns DS_UNSUPPORTED from create() with a message.
 *
 * Forward:  forward(i, params, input, output, workspace, batch)
 * Backward: backward(i, params, input, output, grad_output, grad_input, grad_params, workspace, batch)
 *   - grad_params are ACCUMULATED into (+=), so gradient accumulation needs no extra copy;
 *   - grad_input is OVERWRITTEN; it is NULL for layer 0 (nothing upstream needs it);
 *   - the engine may call forward again just before backward (activation checkpointing), so a layer
 *     must keep what backward needs in `workspace` (engine-owned, sized by workspace_bytes), never in
 *     plugin globals;
 *   - for the last layer grad_output is [1] = d(total)/d(loss) (the engine puts 1/GAS, times the
 *     loss scale under fp16, there).
 * `batch` (the micro-batch's input and target) is passed to every layer: the loss layer reads the
 * target from it.
 * `params` and `grad_params` are arrays with one tensor per parameter of the layer, in the order
 * describe_layer lists them. Workspace memory is at least 16-byte aligned.
 *
 * Tied parameters (since ABI 2): a parameter whose `tied_to` names an earlier layer's parameter
 * ("<layer>.<param>", same shape, itself not tied) has no storage of its own: the layer gets that
 * parameter's values, and what it adds into its grad_params slot is added to that parameter's
 * gradient (GPT-2's LM head tied to the token embedding).
 *
 * Data (since ABI 2): a model whose dataset_info reports num_samples 0 has no data of its own; it
 * trains on the samples dsworker reads from the config's `data` block (a token corpus), which must
 * have the input/target shapes and dtypes it reports; its get_batch is never called. A model with
 * data of its own provides the optional function "get_batch" (see lookup below).
 *
 * Predictions (since ABI 2): when ds_batch.predictions is not NULL (text generation, evaluation),
 * the last layer also writes what it computes the loss from there (a language model: logits
 * [n, seq_len, vocab]); the shape is the one the optional function "describe_predictions" reports.
 *
 * Optional functions (since ABI 3): lookup(name) returns the function of that name, or NULL when
 * the plugin has none. Known names: "get_batch" (ds_get_batch_fn), "describe_predictions"
 * (ds_describe_predictions_fn). New optional functions are added by name, without a new ABI version.
 *
 * Tensors are dense, row-major, with up to 4 dimensions, the batch dimension included (so a sample
 * has at most 3; a sample shape with ndim 0 is a scalar per sample, e.g. a class label). Parameters,
 * gradients and activations are DS_F32 (under mixed precision the engine converts at this boundary);
 * inputs and targets may also be DS_I32 (class labels, token ids). DS_BF16 and DS_F16 name 16-bit
 * tensors; the engine passes none to layers yet.
 */
#ifndef DS_PLUGIN_H
#define DS_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "plugin/ds_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DS_PLUGIN_ABI_VERSION 3u
#define DS_MAX_DIMS 4

/* ds_status (ds_backend.h): DS_OK, DS_ERROR, DS_CONFIG_ERROR, DS_UNSUPPORTED, DS_OUT_OF_MEMORY. */

typedef enum { DS_F32 = 0, DS_I32 = 1, DS_BF16 = 2, DS_F16 = 3 } ds_dtype;

typedef struct {
  int32_t ndim;
  int64_t dims[DS_MAX_DIMS];
} ds_shape;

typedef struct {
  void* data;      /* ndim-dimensional, row-major, contiguous */
  ds_dtype dtype;
  ds_shape shape;
  ds_device_type device; /* where data lives: the backend's device (since ABI 3) */
} ds_tensor;

/* How the engine initialises a parameter: zeros, ones, normal(mean=a, std=b), uniform[a, b). */
typedef enum { DS_INIT_ZEROS = 0, DS_INIT_ONES = 1, DS_INIT_NORMAL = 2, DS_INIT_UNIFORM = 3 } ds_init_kind;

typedef struct {
  const char* name;  /* unique within the layer, e.g. "weight"; the full name is "<layer>.<name>" */
  ds_shape shape;
  ds_init_kind init;
  float a, b;
  const char* tied_to; /* NULL, or the full name of an earlier layer's parameter this one IS (init unused) */
} ds_param_desc;

typedef struct {
  const char* name;              /* unique within the model, e.g. "fc1" */
  int32_t num_params;
  const ds_param_desc* params;   /* valid while the model lives */
} ds_layer_desc;

/* The plugin's dataset: `num_samples` samples; one sample's input and target have these shapes
 * (without the batch dimension) and dtypes. */
typedef struct {
  int64_t num_samples;
  ds_dtype input_dtype;
  ds_shape input_shape;
  ds_dtype target_dtype;
  ds_shape target_shape;
} ds_dataset_info;

/* A micro-batch: input [n, *input_shape], target [n, *target_shape], and where it is in training. */
typedef struct {
  const ds_tensor* input;
  const ds_tensor* target;
  int64_t step;       /* the optimizer step this micro-batch contributes to, counted from 1 */
  int32_t micro_step; /* 0..gradient_accumulation_steps-1 within that step */
  ds_tensor* predictions; /* NULL, or where the last layer also writes its predictions (forward only) */
} ds_batch;

/* Any function pointer, as lookup returns it (cast to the named function's type). */
typedef void (*ds_fn)(void);

typedef struct ds_plugin_api {
  uint32_t abi_version; /* DS_PLUGIN_ABI_VERSION (3) */
  const char* name;     /* e.g. "mlp" */

  /* Builds a model from the config's "model" block (a JSON object as text, "{}" if absent) that runs
   * on `backend` (valid while the model lives). On failure returns DS_CONFIG_ERROR (the block is
   * wrong), DS_UNSUPPORTED (not on this backend) or DS_ERROR (anything else) and writes a message
   * into err (err_len bytes, NUL-terminated) that names the key: "model.hidden: 0 is not >= 1". */
  ds_status (*create)(const char* config_json, const ds_backend* backend, void** model, char* err, size_t err_len);
  void (*destroy)(void* model);
  /* The message of the last DS_ERROR returned for `model`. */
  const char* (*last_error)(void* model);

  int32_t (*num_layers)(void* model);
  ds_status (*describe_layer)(void* model, int32_t layer, ds_layer_desc* out);
  /* The output shape of `layer`, and the bytes of workspace it needs, for an input of shape `input`. */
  ds_status (*output_shape)(void* model, int32_t layer, const ds_shape* input, ds_shape* output);
  ds_status (*workspace_bytes)(void* model, int32_t layer, const ds_shape* input, size_t* bytes);

  ds_status (*forward)(void* model, int32_t layer, const ds_tensor* params, const ds_tensor* input,
                       ds_tensor* output, void* workspace, const ds_batch* batch);
  ds_status (*backward)(void* model, int32_t layer, const ds_tensor* params, const ds_tensor* input,
                        const ds_tensor* output, const ds_tensor* grad_output, ds_tensor* grad_input,
                        ds_tensor* grad_params, void* workspace, const ds_batch* batch);

  ds_status (*dataset_info)(void* model, ds_dataset_info* out);
  /* The optional function `name` (see the top of this file), or NULL. */
  ds_fn (*lookup)(const char* name);
} ds_plugin_api;

/* Optional functions (lookup). */
/* The shape of the last layer's predictions for a micro-batch whose input has shape `input`
 * (ndim 0 = the model makes none; a plugin without this function makes none). */
typedef ds_status (*ds_describe_predictions_fn)(void* model, const ds_shape* input, ds_shape* predictions);
/* Fills input [n, ...] and target [n, ...] (engine-allocated, host memory) with samples indices[0..n-1]. */
typedef ds_status (*ds_get_batch_fn)(void* model, const int64_t* indices, int64_t n, ds_tensor* input,
                                     ds_tensor* target);

/* Tensor parallelism (optional). The engine splits a model over a tensor-parallel group of `size`
 * ranks by adding "tensor_parallel": {"rank": r, "size": T} to the config block create() gets (a plugin
 * that does not read the key refuses it as an unknown key), then hands the group's collectives to
 * set_collectives before any layer runs. Each rank then declares its own share of a split parameter
 * (describe_layer's shapes are the local ones) and describes how it was cut with describe_shard: the
 * full tensor, along `dim`, is `blocks` equal blocks (3 for a fused q,k,v projection), each cut into
 * `size` equal pieces; rank r holds piece r of every block, concatenated. dim -1: replicated (every
 * rank holds the whole parameter). The engine initialises the full tensor and keeps each rank's share,
 * so a model starts as on one rank; replicated parameters must get the same gradient on every rank. */
typedef struct {
  int32_t dim;    /* -1: replicated */
  int32_t blocks; /* >= 1 */
} ds_shard;
/* Sequence parallelism (optional, DeepSpeed-Ulysses). With S ranks in the sequence-parallel group the
 * engine adds "sequence_parallel": {"rank": s, "size": S} to the config block (a plugin that does not read
 * the key refuses it as an unknown key) and hands the group's all-to-alls to set_collectives. Each sample's
 * input and target are then cut along their first dimension (the sequence) into S equal chunks: the layers
 * of rank s see positions [s·T, (s+1)·T) of every sequence, T = seq_len / S (an embedding adds the position
 * offset s·T), and the loss layer returns the mean over its own positions (the engine's gradient average
 * over the data-parallel and sequence-parallel ranks then makes it the whole batch's). Around attention the
 * layer trades its sequence chunk for a share of the heads with seq_to_heads and back with seq_to_sequence.
 * Predictions are this rank's positions; the engine gathers them. */
typedef struct {
  void* ctx;
  /* Tensor parallelism: in place, data[0..n) becomes its sum over the tensor-parallel group. Blocking;
   * NULL without it. */
  ds_status (*allreduce_sum)(void* ctx, float* data, int64_t n);
  /* Tensor parallelism, likewise: data[0..n) becomes its maximum over the group; and
   * out[T·n] = every rank's in[0..n), rank-major. */
  ds_status (*allreduce_max)(void* ctx, float* data, int64_t n);
  ds_status (*allgather)(void* ctx, const float* in, float* out, int64_t n);
  /* Sequence parallelism, both blocking; NULL without it. x is [B, T, K], this rank's chunk of T positions;
   * K is `blocks` column blocks (3 for fused q, k, v), each cut into S pieces of K / (blocks·S) columns.
   * seq_to_heads:    y [B, S·T, K/S] = the whole sequence, piece s of every block (concatenated);
   * seq_to_sequence: the inverse, from y back to x. */
  ds_status (*seq_to_heads)(void* ctx, const float* x, float* y, int64_t B, int64_t T, int64_t K, int32_t blocks);
  ds_status (*seq_to_sequence)(void* ctx, const float* y, float* x, int64_t B, int64_t T, int64_t K, int32_t blocks);
} ds_collectives;
typedef ds_status (*ds_describe_shard_fn)(void* model, int32_t layer, int32_t param, ds_shard* out);
typedef ds_status (*ds_set_collectives_fn)(void* model, const ds_collectives* collectives);

/* The one symbol a plugin exports. */
typedef const ds_plugin_api* (*ds_plugin_entry_fn)(void);
#define DS_PLUGIN_ENTRY_SYMBOL "ds_plugin_entry"

#ifdef __cplusplus
}
#endif
#endif /* DS_PLUGIN_H */
