#pragma once
/// \file status.hpp
/// Results of stage calls and diagnostics of pipeline definitions.

#include <string>
#include <utility>
#include <vector>

namespace swarmflow {

/// What kind of result a `Status` carries. `end_of_stream` is a flow result,
/// not an error: a source returns it when it has nothing more to produce.
enum class StatusCode {
  ok,
  end_of_stream,
  invalid_argument,
  not_found,
  failed_precondition,
  unavailable,
  internal,
};

/// The result of an operation: ok, end of stream, or an error with a message.
class Status {
 public:
  /// An ok status.
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  /// Ok.
  static Status success() { return {}; }
  /// The flow result that ends a source.
  static Status end_of_stream() { return {StatusCode::end_of_stream, {}}; }
  /// An error of kind `code`.
  static Status error(std::string message, StatusCode code = StatusCode::internal) {
    return {code, std::move(message)};
  }

  /// True only for `StatusCode::ok`.
  bool ok() const { return code_ == StatusCode::ok; }
  /// True for `StatusCode::end_of_stream`.
  bool is_end_of_stream() const { return code_ == StatusCode::end_of_stream; }
  /// True for every code that is neither ok nor end of stream.
  bool is_error() const { return !ok() && !is_end_of_stream(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::ok;
  std::string message_;
};

/// One mistake found in a pipeline definition, with where it is and how to fix it.
struct Diagnostic {
  std::string file;     ///< path of the definition, or a name given to a string
  int line = 0;         ///< 1-based; 0 when the mistake has no single place
  int column = 0;       ///< 1-based
  std::string message;  ///< what is wrong
  std::string hint;     ///< what to do about it; may be empty

  /// `file:line:col: error: message (hint)`.
  std::string to_string() const;
};

/// Formats all diagnostics, one per line.
std::string format_diagnostics(const std::vector<Diagnostic>& diagnostics);

}  // namespace swarmflow
