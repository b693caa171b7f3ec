#include "lm/tokenizer.hpp"

#include <algorithm>

namespace swarmflow::lm {

Tokenizer::Tokenizer(std::vector<std::string> pieces, int bos)
    : pieces_(std::move(pieces)), by_first_byte_(256), bos_(bos) {
  for (int id = 0; id < static_cast<int>(pieces_.size()); ++id) {
    const std::string& p = pieces_[static_cast<std::size_t>(id)];
    if (id == bos_ || p.empty()) continue;
    by_first_byte_[static_cast<unsigned char>(p[0])].push_back(id);
  }
  for (auto& ids : by_first_byte_) {
    std::stable_sort(ids.begin(), ids.end(), [this](int a, int b) {
      return pieces_[static_cast<std::size_t>(a)].size() > pieces_[static_cast<std::size_t>(b)].size();
    });
  }
}

std::vector<int> Tokenizer::encode(std::string_view text, bool add_bos) const {
  std::vector<int> ids;
  ids.reserve(text.size() + 1);
  if (add_bos) ids.push_back(bos_);
  std::size_t i = 0;
  while (i < text.size()) {
    bool matched = false;
    for (int id : by_first_byte_[static_cast<unsigned char>(text[i])]) {
      const std::string& p = pieces_[static_cast<std::size_t>(id)];
      if (text.compare(i, p.size(), p) == 0) {
        ids.push_back(id);
        i += p.size();
        matched = true;
        break;
      }
    }
    if (!matched) ++i;  // a byte the vocabulary lacks is left out
  }
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::string text;
  for (int id : ids) text += piece(id);
  return text;
}

const std::string& Tokenizer::piece(int id) const {
  if (id == bos_ || id < 0 || id >= static_cast<int>(pieces_.size())) return empty_;
  return pieces_[static_cast<std::size_t>(id)];
}

}  // namespace swarmflow::lm
