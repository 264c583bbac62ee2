// Tensor: a contiguous row-major array with a dtype and a device tag, the unit every Backend op
// takes and returns (DESIGN.md §4). Storage is reference-counted, so row slices and reshapes are
// cheap views into the same buffer; clone() (through the backend) makes an independent copy.
// Weights are not Tensors: they stay TensorViews into the checkpoint's memory map.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "util/dtype.h"
#include "util/error.h"

namespace degen {

enum class Device : uint8_t { cpu, cuda };

struct Tensor {
  DType dtype = DType::f32;
  Device device = Device::cpu;
  std::vector<int64_t> shape;        // row-major, outermost first
  std::shared_ptr<uint8_t> storage;  // owning buffer (host memory for Device::cpu)
  size_t offset = 0;                 // bytes from storage.get() to element 0

  bool empty() const { return !storage; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return shape.at(static_cast<size_t>(i < 0 ? int(shape.size()) + i : i)); }
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }  // innermost extent
  int64_t rows() const { return cols() == 0 ? 0 : numel() / cols(); }  // product of the outer extents

  void* raw() { return storage.get() + offset; }
  const void* raw() const { return storage.get() + offset; }
  template <typename T> T* data() { return reinterpret_cast<T*>(raw()); }
  template <typename T> const T* data() const { return reinterpret_cast<const T*>(raw()); }

  // View with another shape of the same element count (no copy).
  Tensor reshape(std::vector<int64_t> new_shape) const {
    Tensor t = *this;
    t.shape = std::move(new_shape);
    DEGEN_ASSERT(t.numel() == numel(), "reshape changes the element count");
    return t;
  }
  // View of rows [r0, r0 + n) along the outermost dimension (no copy).
  Tensor slice0(int64_t r0, int64_t n) const {
    DEGEN_ASSERT(!shape.empty() && r0 >= 0 && n >= 0 && r0 + n <= shape[0], "slice0 out of range");
    Tensor t = *this;
    int64_t inner = shape[0] == 0 ? 0 : numel() / shape[0];
    t.offset += static_cast<size_t>(r0 * inner) * dtype_size(dtype);
    t.shape[0] = n;
    return t;
  }
};

std::string shape_str(const std::vector<int64_t>& shape);  // model/safetensors.h: "[2, 3, 4]"

// A host tensor owning fresh zero-filled memory (CPU backend and tests).
inline Tensor host_tensor(std::vector<int64_t> shape, DType dtype = DType::f32) {
  Tensor t;
  t.dtype = dtype;
  t.device = Device::cpu;
  t.shape = std::move(shape);
  size_t bytes = std::max<size_t>(t.nbytes(), 1);
  t.storage = std::shared_ptr<uint8_t>(new uint8_t[bytes](), std::default_delete<uint8_t[]>());
  return t;
}

}  // namespace degen
