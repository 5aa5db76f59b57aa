// dsworker --selftest's checks of the multi-tensor launchers that the device step runs every step
// (kernels/cuda/launch.h: adam_steps, sgd_steps, scale_multi, round_copies, move_multi, sum_squares_multi):
// each over tensors of odd sizes (an empty one, one of several 4096-element blocks) laid side by side in one
// device array with gaps between them, against the one-tensor launcher run on each tensor, which the
// self-test's other rows check against the CPU. So these hold the multi-tensor forms to the CPU's bits too.
#pragma once
#include <cstddef>
#include <random>

namespace ds {

enum class MultiTensorOp { adam, adamw, sgd, scale, round_bf16, round_fp16, moves_bf16, moves_fp16 };

// The row's kernel name in the self-test's table.
const char* multi_tensor_name(MultiTensorOp op);
// The tensors' sizes, for the table's shape column.
const char* multi_tensor_shape();

// The elements, over every array the launch writes (the gaps between the tensors included, which neither
// form may touch), whose bits differ between the multi-tensor launch and the one-tensor launches.
// moves_*: fp32 copies, narrowings to the 16-bit type and widenings from it, each compared.
size_t multi_tensor_differing(MultiTensorOp op, std::mt19937& rng);

// sum_squares_multi over the tensors (one value beyond fp32's range when squared) against the sum in double
// on the host: |error| / sum.
double multi_tensor_sum_squares_error(std::mt19937& rng);

}  // namespace ds
