#pragma once
/// \file tokenizer.hpp
/// Text to token ids and back, with the vocabulary stored in the model file.
/// The shipped model is byte-level: ids 0..255 are the bytes, and one more id
/// (BOS) starts every sequence. Pieces longer than one byte, if a file has
/// them, are matched longest first.

#include <string>
#include <string_view>
#include <vector>

namespace swarmflow::lm {

class Tokenizer {
 public:
  Tokenizer() = default;
  /// `pieces[id]` is the byte string of token `id`; `bos` starts a sequence.
  Tokenizer(std::vector<std::string> pieces, int bos);

  /// The ids of `text`, after BOS when `add_bos`. Every byte is covered, so
  /// `decode(encode(s)) == s` when the vocabulary holds all 256 bytes.
  std::vector<int> encode(std::string_view text, bool add_bos) const;
  /// The text of `ids`; BOS and ids out of range contribute nothing.
  std::string decode(const std::vector<int>& ids) const;
  /// The text of one id ("" for BOS or an unknown id).
  const std::string& piece(int id) const;
  int bos() const { return bos_; }
  int vocab_size() const { return static_cast<int>(pieces_.size()); }

 private:
  std::vector<std::string> pieces_;
  std::vector<std::vector<int>> by_first_byte_;  // ids per first byte, longest piece first
  int bos_ = 0;
  std::string empty_;
};

}  // namespace swarmflow::lm
