/* The model-plugin ABI version 2, frozen (C). The loader still loads plugins built against it and
 * adapts them to version 3 (plugin_v2.cpp), the way NCCL keeps its older plugin headers: such a
 * plugin runs on the CPU backend only. Differences from version 3 (ds_plugin.h): a tensor has no
 * device; create() takes no backend; get_batch and describe_predictions are entries of the table,
 * not optional functions; the status codes are DS_OK, DS_ERROR and DS_CONFIG_ERROR. The shapes,
 * parameter, layer and dataset descriptions are version 3's, unchanged. Do not edit.
 */
#ifndef DS_PLUGIN_V2_H
#define DS_PLUGIN_V2_H

#include "plugin/ds_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DS_PLUGIN_ABI_VERSION_2 2u

typedef struct {
  void* data;
  ds_dtype dtype; /* DS_F32 or DS_I32 */
  ds_shape shape;
} ds_tensor_v2;

typedef struct {
  const ds_tensor_v2* input;
  const ds_tensor_v2* target;
  int64_t step;
  int32_t micro_step;
  ds_tensor_v2* predictions;
} ds_batch_v2;

typedef struct ds_plugin_api_v2 {
  uint32_t abi_version; /* 2 */
  const char* name;
  ds_status (*create)(const char* config_json, void** model, char* err, size_t err_len);
  void (*destroy)(void* model);
  const char* (*last_error)(void* model);
  int32_t (*num_layers)(void* model);
  ds_status (*describe_layer)(void* model, int32_t layer, ds_layer_desc* out);
  ds_status (*output_shape)(void* model, int32_t layer, const ds_shape* input, ds_shape* output);
  ds_status (*workspace_bytes)(void* model, int32_t layer, const ds_shape* input, size_t* bytes);
  ds_status (*forward)(void* model, int32_t layer, const ds_tensor_v2* params, const ds_tensor_v2* input,
                       ds_tensor_v2* output, void* workspace, const ds_batch_v2* batch);
  ds_status (*backward)(void* model, int32_t layer, const ds_tensor_v2* params, const ds_tensor_v2* input,
                        const ds_tensor_v2* output, const ds_tensor_v2* grad_output, ds_tensor_v2* grad_input,
                        ds_tensor_v2* grad_params, void* workspace, const ds_batch_v2* batch);
  ds_status (*dataset_info)(void* model, ds_dataset_info* out);
  ds_status (*describe_predictions)(void* model, const ds_shape* input, ds_shape* predictions);
  ds_status (*get_batch)(void* model, const int64_t* indices, int64_t n, ds_tensor_v2* input, ds_tensor_v2* target);
} ds_plugin_api_v2;

#ifdef __cplusplus
}
#endif
#endif /* DS_PLUGIN_V2_H */
