#include "alpha/ops/embedding.h"

#include <type_traits>

#include "alpha/kernels/embedding.h"
#include "alpha/ops/check.h"
#include "alpha/ops/index_check.h"

namespace alpha::ops {

namespace {

// Validated, contiguous ids on the reference tensor's device. On a GPU the range check reads the ids on the
// host (index_check.h: one device-to-host copy that waits for the device's stream); range_checked skips it.
Tensor checked_ids(std::string_view op, const Tensor& ids, const Tensor& reference, int64_t vocab_size,
                   bool range_checked = false) {
  check_dtype(op, "ids", ids, {DType::i32});
  check_same_device(op, "ids", ids, reference);
  Tensor contiguous_ids = ids.contiguous();
  if (!range_checked) check_index_range(op, "ids", contiguous_ids, vocab_size, "position");
  return contiguous_ids;
}

}  // namespace

Tensor embedding(const Tensor& ids, const Tensor& table, bool ids_checked) {
  check_backend_float("embedding", "table", table);
  check_dim("embedding", "table", table, 2);
  const int64_t V = table.size(0), C = table.size(1);
  Tensor idc = checked_ids("embedding", ids, table, V, ids_checked);
  Tensor tc = table.contiguous();
  Shape out_shape = ids.shape();
  out_shape.push_back(C);
  Tensor out = Tensor::empty(out_shape, table.dtype(), table.device());
  // ids are i32 whatever the table holds: the kernel's element type is the table's.
  dispatch_float("embedding", table, [&]<class T>(const auto& where) {
    ALPHA_KERNEL(embedding)(
        where, kernels::EmbeddingArgs<T>{idc.data<int32_t>(), tc.data<T>(), out.data<T>(), idc.numel(), V, C});
  });
  return out;
}

bool embedding_backward_writes(DType dy_dtype, DType grad_dtype) {
  return grad_dtype == dy_dtype || (grad_dtype == DType::f32 && (dy_dtype == DType::bf16 || dy_dtype == DType::f16));
}

Tensor embedding_backward(const Tensor& dy, const Tensor& ids, int64_t vocab_size, bool ids_checked,
                          std::optional<DType> grad_dtype, const Tensor& add_into) {
  check_backend_float("embedding_backward", "dy", dy);
  if (vocab_size < 1)
    raise<ValueError>("embedding_backward", "vocab_size", "at least 1", std::to_string(vocab_size));
  const DType out_dtype = grad_dtype.value_or(dy.dtype());
  const bool widened = out_dtype != dy.dtype();
  if (!embedding_backward_writes(dy.dtype(), out_dtype))
    raise<DTypeError>("embedding_backward", "grad_dtype",
                      std::string(dtype_name(dy.dtype())) + " (dy's), or f32 beside bf16 or f16 dy",
                      std::string(dtype_name(out_dtype)));
  check_min_dim("embedding_backward", "dy", dy, 1);
  const int64_t C = dy.size(-1);
  Tensor idc = checked_ids("embedding_backward", ids, dy, vocab_size, ids_checked);
  Shape dy_shape = ids.shape();
  dy_shape.push_back(C);
  check_shape("embedding_backward", "dy", dy, dy_shape);
  Tensor dyc = dy.contiguous();
  if (add_into.defined()) check_in_place("embedding_backward", "add_into", add_into, {vocab_size, C}, out_dtype, dy);
  Tensor dtable = add_into.defined() ? add_into : Tensor::empty({vocab_size, C}, out_dtype, dy.device());
  dispatch_float("embedding_backward", dy, [&]<class T>(const auto& where) {
    auto launch = [&]<class G>() {
      const kernels::EmbeddingBackwardArgs<T, G> args{
          dyc.data<T>(), idc.data<int32_t>(), dtable.data<G>(), idc.numel(), vocab_size, C, add_into.defined()};
      ALPHA_KERNEL(embedding_backward)(where, args);
    };
    if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) {
      if (widened) return launch.template operator()<float>();
    }
    launch.template operator()<T>();
  });
  return dtable;
}

}  // namespace alpha::ops
