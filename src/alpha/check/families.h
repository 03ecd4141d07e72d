// The kernel families the harness checks, one function each (checks_<family>.cpp); the registry in
// kernel_check.cpp lists them. Only in builds with the CUDA backend.
#pragma once
#if ALPHA_WITH_CUDA
#include "alpha/check/kernel_check.h"

namespace alpha::check {

void check_elementwise(Context& ctx);
void check_copy(Context& ctx);
void check_layernorm(Context& ctx);
void check_activation(Context& ctx);
void check_cross_entropy(Context& ctx);
void check_embedding(Context& ctx);
void check_matmul(Context& ctx);
void check_dropout(Context& ctx);
void check_optim(Context& ctx);
void check_attention(Context& ctx);
void check_flash_attention(Context& ctx);
void check_attention_jvp(Context& ctx);

}  // namespace alpha::check
#endif
