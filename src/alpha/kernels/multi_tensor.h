// How many tensors one multi-tensor GPU launch takes (kernels/cuda/multi_tensor.cuh): the list kernels of
// optim.h and copy.h split a longer list into several launches.
#pragma once

namespace alpha::kernels::cuda {
inline constexpr int kTensorsPerLaunch = 128;
}  // namespace alpha::kernels::cuda
