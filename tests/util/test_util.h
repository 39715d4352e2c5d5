// Helpers shared by the CPU and GPU test suites: owning host tensors with random contents,
// ragged batch generators, a relative-error metric, error assertions and the GPU skip macro.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "mlakit/error.h"
#include "mlakit/tensor.h"

namespace mlakit {
namespace test {

// Owning, contiguous host tensor. Values are stored in `dtype`; get/set go through double.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<int64_t> shape);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return bytes_.size(); }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

  // View of the whole tensor (contiguous) on the CPU, or with another device tag.
  TensorView view(Device device = Device::cpu()) const;

  double get(int64_t i) const;   // flat index
  void set(int64_t i, double x); // rounded to the dtype
  std::vector<double> to_doubles() const;

  // Normal(mean, stddev) values from `rng`, rounded to the dtype.
  void fill_normal(std::mt19937_64& rng, double stddev = 1.0, double mean = 0.0);
  // Every byte = pattern (poison before a call that must not write).
  void fill_bytes(uint8_t pattern);

 private:
  DType dtype_ = DType::kFP32;
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  mutable std::vector<uint8_t> bytes_;  // mutable: a view of a const tensor may be written
};

// Device copy of a host tensor (owning). On the CPU it is a plain host buffer.
class DeviceTensor {
 public:
  DeviceTensor(const HostTensor& src, Device device);
  ~DeviceTensor();
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  TensorView view() const;
  // Copies back (synchronizing the default stream) into `dst`, which must have the same size.
  void copy_to(HostTensor& dst) const;

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  DType dtype_;
  std::vector<int64_t> shape_;
  Device device_;
};

// Random lengths for `batch` sequences, drawn from `choices` (default: 0, 1, odd, block-edge
// and > 128 values).
std::vector<int32_t> make_random_lengths(int batch, std::mt19937_64& rng,
                                         const std::vector<int32_t>& choices = {});
// Exclusive prefix sum with a leading 0: batch + 1 entries.
std::vector<int32_t> make_indptr(const std::vector<int32_t>& lengths);

// ||a - b|| / ||b|| (L2, in double). Any NaN, or a size mismatch -> +inf; 0 if both are zero.
double relative_error(const std::vector<double>& a, const std::vector<double>& b);
double relative_error(const HostTensor& a, const HostTensor& b);
// Max |got - want| / (1 + |want|) over scalars per row such as LSE values; +inf on NaN or an
// infinity mismatch.
double lse_error(const std::vector<double>& got, const std::vector<double>& want);

// True if a CUDA device can be used; otherwise *why says why.
bool gpu_available(std::string* why);

// Checks that f() throws mlakit::Error with this kind and argument name.
template <class F>
::testing::AssertionResult throws_error(F&& f, ErrorKind kind, const std::string& argument) {
  try {
    f();
  } catch (const Error& e) {
    if (e.kind() == kind && e.argument() == argument) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "threw kind " << static_cast<int>(e.kind()) << " argument '" << e.argument()
           << "' (" << e.what() << "), expected kind " << static_cast<int>(kind)
           << " argument '" << argument << "'";
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-mlakit exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw (expected argument '" << argument << "')";
}

}  // namespace test
}  // namespace mlakit

// Skips the current test (printing the reason to stdout, so it shows in ctest logs) when no
// CUDA device is usable.
#define MLAKIT_SKIP_IF_NO_GPU()                                              \
  do {                                                                       \
    std::string mlakit_skip_why_;                                            \
    if (!::mlakit::test::gpu_available(&mlakit_skip_why_)) {                 \
      std::printf("[  SKIPPED ] no GPU: %s\n", mlakit_skip_why_.c_str());    \
      std::fflush(stdout);                                                   \
      GTEST_SKIP() << "no GPU: " << mlakit_skip_why_;                        \
    }                                                                        \
  } while (0)
