// Byte-level BPE (see bpe_tokenizer.h). GPT-2's pre-tokenizer pattern needs Unicode letter and
// number classes and a look-ahead: PCRE2 in UTF mode matches it.
#include "data/bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/errors.h"

namespace ds {
namespace {

// GPT-2's words: contractions, letters, numbers, other symbols (each with one leading space), and
// runs of whitespace (the last of which goes with the next word).
constexpr const char* kWordPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// The length of the UTF-8 character starting with byte `lead` (1 for a stray continuation byte).
size_t char_length(unsigned char lead) {
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}

}  // namespace

struct BpeTokenizer::Pattern {
  pcre2_code* code = nullptr;
  ~Pattern() { pcre2_code_free(code); }
};

BpeTokenizer::~BpeTokenizer() = default;
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;

BpeTokenizer BpeTokenizer::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("{}: cannot read the tokenizer", path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("{}: not a tokenizer.json: {}", path, e.what()));
  }
  auto fail = [&](const std::string& key, const std::string& what) -> void {
    throw ConfigError(fmt::format("{}: {}: {}", path, key, what));
  };
  auto is_set = [](const nlohmann::json& v, const char* key) {
    return v.contains(key) && !v[key].is_null() && v[key] != false && v[key] != "";
  };
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) fail("model", "missing");
  const auto& model = j["model"];
  if (model.value("type", "") != "BPE")
    fail("model.type", fmt::format("{} is not \"BPE\"", model.value("type", nlohmann::json()).dump()));
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback"})
    if (is_set(model, key)) fail(std::string("model.") + key, fmt::format("{} is not supported", model[key].dump()));
  if (is_set(j, "normalizer")) fail("normalizer", "not supported (byte-level BPE without a normalizer only)");
  const nlohmann::json pre = j.value("pre_tokenizer", nlohmann::json());
  if (!pre.is_object() || pre.value("type", "") != "ByteLevel")
    fail("pre_tokenizer", fmt::format("{} is not a ByteLevel pre-tokenizer", pre.dump()));
  if (!pre.value("use_regex", true)) fail("pre_tokenizer.use_regex", "false is not supported");
  const nlohmann::json decoder = j.value("decoder", nlohmann::json());
  if (!decoder.is_null() && decoder.value("type", "") != "ByteLevel")
    fail("decoder", fmt::format("{} is not a ByteLevel decoder", decoder.dump()));

  BpeTokenizer t;
  t.path_ = path;
  t.add_prefix_space_ = pre.value("add_prefix_space", false);
  // GPT-2's stand-ins: printable Latin-1 bytes stand for themselves, the others for U+0100 onwards.
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    t.byte_chars_[b] = utf8(printable ? static_cast<uint32_t>(b) : next++);
    t.char_bytes_[t.byte_chars_[b]] = static_cast<uint8_t>(b);
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) fail("model.vocab", "missing");
  auto place = [&](const std::string& token, const nlohmann::json& id, const std::string& key) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() > std::numeric_limits<uint16_t>::max())
      fail(key, fmt::format("id {} of \"{}\" is not in 0..65535 (token files hold 16-bit ids)", id.dump(), token));
    const auto i = id.get<uint32_t>();
    if (t.tokens_.size() <= i) t.tokens_.resize(i + 1);
    t.tokens_[i] = token;
    t.ids_[token] = i;
  };
  for (const auto& [token, id] : model["vocab"].items()) place(token, id, "model.vocab");
  for (const auto& added : j.value("added_tokens", nlohmann::json::array())) {
    const std::string content = added.value("content", "");
    place(content, added.value("id", nlohmann::json()), "added_tokens");
    t.added_.emplace_back(content, added["id"].get<uint32_t>());
  }
  std::sort(t.added_.begin(), t.added_.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  const nlohmann::json merges = model.value("merges", nlohmann::json::array());
  uint32_t rank = 0;
  for (const auto& m : merges) {
    std::string left, right;
    if (m.is_string()) {  // "a b" (older files)
      const auto& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos) fail("model.merges", fmt::format("{} is not \"left right\"", m.dump()));
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      fail("model.merges", fmt::format("{} is not a pair of tokens", m.dump()));
    }
    const auto l = t.ids_.find(left), r = t.ids_.find(right), merged = t.ids_.find(left + right);
    if (l == t.ids_.end() || r == t.ids_.end() || merged == t.ids_.end())
      fail("model.merges", fmt::format("{} names a token missing from the vocabulary", m.dump()));
    t.merges_.emplace(std::pair{l->second, r->second}, std::pair{rank++, merged->second});
  }

  int error = 0;
  PCRE2_SIZE offset = 0;
  t.pattern_ = std::make_unique<Pattern>();
  t.pattern_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kWordPattern), PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (!t.pattern_->code) throw std::logic_error(fmt::format("bpe: the word pattern does not compile (error {})", error));
  return t;
}

void BpeTokenizer::encode_word(std::string_view bytes, std::vector<uint32_t>& out) const {
  std::string word;
  for (unsigned char b : bytes) word += byte_chars_[b];
  if (auto hit = cache_.find(word); hit != cache_.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }
  std::vector<uint32_t> symbols;  // one per stand-in character, then merged pairwise
  for (size_t i = 0; i < word.size();) {
    const size_t n = char_length(static_cast<unsigned char>(word[i]));
    const auto id = ids_.find(word.substr(i, n));
    if (id == ids_.end())
      throw ConfigError(fmt::format("{}: the byte {:#04x} has no token (not a byte-level vocabulary)", path_,
                                    char_bytes_.at(word.substr(i, n))));
    symbols.push_back(id->second);
    i += n;
  }
  // The lowest-ranked adjacent pair (the leftmost on a tie) is merged, until no pair has a merge.
  for (;;) {
    size_t best = symbols.size();
    uint32_t best_rank = std::numeric_limits<uint32_t>::max(), merged = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto m = merges_.find({symbols[i], symbols[i + 1]});
      if (m != merges_.end() && m->second.first < best_rank) {
        best = i;
        best_rank = m->second.first;
        merged = m->second.second;
      }
    }
    if (best == symbols.size()) break;
    symbols[best] = merged;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
  cache_.emplace(std::move(word), std::move(symbols));
}

void BpeTokenizer::encode_plain(std::string_view text, size_t offset, const std::string& what,
                                std::vector<uint32_t>& out) const {
  if (text.empty()) return;
  std::string prefixed;
  if (add_prefix_space_ && text.front() != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  // Owned: encode_word throws for a byte without a token (the match data leaked, found by the asan preset).
  const std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> owned(
      pcre2_match_data_create_from_pattern(pattern_->code, nullptr), pcre2_match_data_free);
  pcre2_match_data* match = owned.get();
  PCRE2_SIZE start = 0;
  while (start < text.size()) {
    const int rc = pcre2_match(pattern_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                               start == 0 ? 0 : PCRE2_NO_UTF_CHECK, match, nullptr);
    if (rc < 0) {
      const PCRE2_SIZE bad = pcre2_get_startchar(match);  // a UTF-8 error's offset
      const size_t shift = prefixed.empty() ? 0 : 1;
      if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21)
        throw ConfigError(fmt::format("{}: invalid UTF-8 at byte {}; the tokenizer {} reads UTF-8 text", what,
                                      offset + bad - shift, path_));
      throw ConfigError(fmt::format("{}: the tokenizer's word pattern failed at byte {} (PCRE2 error {})", what,
                                    offset + start - shift, rc));
    }
    const PCRE2_SIZE* range = pcre2_get_ovector_pointer(match);
    encode_word(text.substr(range[0], range[1] - range[0]), out);
    start = range[1];
  }
}

std::vector<uint32_t> BpeTokenizer::encode(std::string_view text, const std::string& what) const {
  std::vector<uint32_t> out;
  size_t done = 0;
  while (done < text.size()) {
    // The earliest added token (the longest one where several start at the same byte).
    size_t at = std::string_view::npos;
    const std::pair<std::string, uint32_t>* found = nullptr;
    for (const auto& added : added_) {
      const size_t p = text.find(added.first, done);
      if (p < at) {
        at = p;
        found = &added;
      }
    }
    encode_plain(text.substr(done, at == std::string_view::npos ? std::string_view::npos : at - done), done, what, out);
    if (!found) break;
    out.push_back(found->second);
    done = at + found->first.size();
  }
  return out;
}

std::string BpeTokenizer::decode(std::span<const uint32_t> ids) const {
  std::string text;
  for (uint32_t id : ids) {
    if (id >= tokens_.size() || (tokens_[id].empty()))
      throw ConfigError(fmt::format("{}: token id {} is not in the vocabulary", path_, id));
    const std::string& token = tokens_[id];
    if (std::any_of(added_.begin(), added_.end(), [&](const auto& a) { return a.second == id; })) {
      text += token;  // added tokens are their own text
      continue;
    }
    for (size_t i = 0; i < token.size();) {
      const size_t n = char_length(static_cast<unsigned char>(token[i]));
      const auto b = char_bytes_.find(token.substr(i, n));
      if (b == char_bytes_.end())
        throw ConfigError(fmt::format("{}: token {} ({}) is not byte-level", path_, id, token));
      text += static_cast<char>(b->second);
      i += n;
    }
  }
  return text;
}

}  // namespace ds
