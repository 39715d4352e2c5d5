// One error convention for the whole library: every rejected call throws mlakit::Error
// before it writes anything. The message names the offending argument.
#pragma once

#include <stdexcept>
#include <string>

namespace mlakit {

enum class ErrorKind : int {
  kInvalidArgument = 0,  // a value is wrong (shape, range, monotonicity, alignment) -> ValueError
  kTypeMismatch = 1,     // a dtype or device is wrong                              -> TypeError
  kUnsupported = 2,      // valid but not implemented (head dims, backend missing)  -> ValueError
  kRuntime = 3,          // CUDA or system failure                                  -> RuntimeError
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string argument, const std::string& message)
      : std::runtime_error(argument.empty() ? "mlakit: " + message : "mlakit: " + argument + ": " + message),
        kind_(kind),
        argument_(std::move(argument)) {}
  ErrorKind kind() const noexcept { return kind_; }
  // Name of the argument that was rejected ("q", "qo_indptr", ...), empty when none applies.
  const std::string& argument() const noexcept { return argument_; }

 private:
  ErrorKind kind_;
  std::string argument_;
};

}  // namespace mlakit
