// Reading tokenizer files into a Tokenizer::Impl: Hugging Face's tokenizer.json (each
// component by its "type"), GPT-2's vocab.json + merges.txt, and tokenizer_config.json's
// bos/eos. Every field is checked where it is read; errors name the file and the field.
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ding/error.h"
#include "ding/models/input_files.h"
#include "tokenizer_parts.h"

namespace ding::tok {

namespace {

using nlohmann::json;

// Ids beyond this are a corrupt file, not a vocabulary (the largest real ones are ~260k);
// the bound keeps a bad id from sizing a multi-gigabyte table.
constexpr int64_t kMaxTokenId = int64_t(1) << 24;
constexpr const char* kEndOfText = "<|endoftext|>";
// The pre-tokenization regex of GPT-2 (openai/gpt-2 encoder.py), also what HF's ByteLevel
// pre-tokenizer applies when use_regex is true.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

json read_json(const std::string& path) { return parse_json(read_text_file(path), path); }

// A component object of tokenizer.json and where it sits, for reading its fields.
struct Field {
  const json& j;
  const std::string& path;
  std::string name;  // "pre_tokenizer.pretokenizers[0]"

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorCode::parse, fmt::format("{}: {}{}", path, name, what));
  }
  [[noreturn]] void unsupported(const std::string& what) const {
    throw Error(ErrorCode::not_implemented, fmt::format("{}: {}{} is not supported", path, name, what));
  }
  std::string type() const {
    if (!j.is_object()) fail(fmt::format(" is not a JSON object but {}", json_excerpt(j)));
    if (!j.contains("type") || !j["type"].is_string()) fail(" has no \"type\"");
    return j["type"].get<std::string>();
  }
  bool has(const char* key) const { return j.contains(key) && !j[key].is_null(); }
  bool flag(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_boolean()) fail(fmt::format(".{} is not a boolean but {}", key, json_excerpt(j[key])));
    return j[key].get<bool>();
  }
  std::string string(const char* key, std::optional<std::string> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      fail(fmt::format(" has no \"{}\"", key));
    }
    if (!j[key].is_string()) fail(fmt::format(".{} is not a string but {}", key, json_excerpt(j[key])));
    return j[key].get<std::string>();
  }
  size_t count(const char* key) const {
    if (!has(key) || !j[key].is_number_unsigned()) fail(fmt::format(".{} is not a count but {}", key, json_excerpt(j.value(key, json()))));
    return j[key].get<size_t>();
  }
  const json& array(const char* key) const {
    if (!has(key) || !j[key].is_array()) fail(fmt::format(" has no \"{}\" array", key));
    return j[key];
  }
  Field item(const char* key, size_t i) const { return {j[key][i], path, fmt::format("{}.{}[{}]", name, key, i)}; }
  Field member(const char* key) const { return {j[key], path, fmt::format("{}.{}", name, key)}; }
  // One character (Metaspace's replacement, Strip's content).
  std::string character(const char* key, const char* fallback) const {
    const std::string s = string(key, fallback);
    if (s.empty() || valid_utf8_prefix(s) != s.size() || utf8_char_at(s, 0).length != int(s.size()))
      fail(fmt::format(".{} is not one character but {}", key, json_excerpt(json(s))));
    return s;
  }
};

// HF's {"String": "..."} or {"Regex": "..."} (Split, Replace).
Replacement parse_pattern(const Field& f, std::string content) {
  const json& p = f.has("pattern") ? f.j["pattern"] : json();
  Replacement r;
  r.content = std::move(content);
  if (p.is_object() && p.contains("String") && p["String"].is_string()) {
    r.literal = p["String"].get<std::string>();
    if (r.literal.empty()) f.fail(".pattern.String is empty");
  } else if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) {
    r.regex = std::make_unique<Regex>(p["Regex"].get<std::string>(), false, f.path + ": " + f.name + ".pattern");
  } else {
    f.fail(fmt::format(".pattern is not {{\"String\": ...}} or {{\"Regex\": ...}} but {}", json_excerpt(p)));
  }
  return r;
}

PrependScheme parse_prepend_scheme(const Field& f) {
  // Files older than prepend_scheme say add_prefix_space instead.
  if (!f.has("prepend_scheme")) return f.flag("add_prefix_space", true) ? PrependScheme::always : PrependScheme::never;
  const std::string s = f.string("prepend_scheme");
  if (s == "always") return PrependScheme::always;
  if (s == "first") return PrependScheme::first;
  if (s == "never") return PrependScheme::never;
  f.fail(fmt::format(".prepend_scheme is not \"always\", \"first\" or \"never\" but {}", json_excerpt(json(s))));
}

// Real tokenizers chain a handful of normalizers, pre-tokenizers and decoders; every step runs over
// every piece of text, so a file with thousands (flat, or nested Sequences multiplying) is refused.
constexpr size_t kMaxComponentSteps = 64;

void check_step_count(const Field& f, const char* key, size_t steps) {
  if (steps > kMaxComponentSteps)
    f.fail(fmt::format(".{}: more than {} steps in all (Sequences included)", key, kMaxComponentSteps));
}

void parse_normalizer(const Field& f, std::vector<Normalizer>& out) {
  const std::string type = f.type();
  if (type == "Sequence") {
    for (size_t i = 0; i < f.array("normalizers").size(); ++i) {
      parse_normalizer(f.item("normalizers", i), out);
      check_step_count(f, "normalizers", out.size());
    }
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    const UnicodeForm form = type == "NFC" ? UnicodeForm::nfc : type == "NFD" ? UnicodeForm::nfd
                             : type == "NFKC" ? UnicodeForm::nfkc : UnicodeForm::nfkd;
    if (!have_unicode_normalization())
      throw Error(ErrorCode::not_implemented,
                  fmt::format("{}: {}: {} normalization needs ding built with ICU", f.path, f.name, unicode_form_name(form)));
    out.push_back(form);
  } else if (type == "Prepend") {
    out.push_back(Prepend{f.string("prepend")});
  } else if (type == "Replace") {
    out.push_back(parse_pattern(f, f.string("content")));
  } else {
    f.unsupported(fmt::format(".type \"{}\" (ding supports NFC, NFD, NFKC, NFKD, Prepend, Replace and Sequence)", type));
  }
}

SplitBehavior parse_behavior(const Field& f) {
  const std::string b = f.string("behavior", "Isolated");
  if (b == "Removed") return SplitBehavior::removed;
  if (b == "Isolated") return SplitBehavior::isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (b == "Contiguous") return SplitBehavior::contiguous;
  f.fail(fmt::format(".behavior {} is not Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous", json_excerpt(json(b))));
}

void parse_pre_tokenizer(const Field& f, std::vector<PreTokenizerStep>& out) {
  const std::string type = f.type();
  if (type == "Sequence") {
    for (size_t i = 0; i < f.array("pretokenizers").size(); ++i) {
      parse_pre_tokenizer(f.item("pretokenizers", i), out);
      check_step_count(f, "pretokenizers", out.size());
    }
  } else if (type == "Split") {
    Replacement pattern = parse_pattern(f, "");
    SplitStep step;
    step.pattern = pattern.regex ? std::move(pattern.regex)
                                 : std::make_unique<Regex>(pattern.literal, true, f.path + ": " + f.name + ".pattern");
    step.behavior = parse_behavior(f);
    step.invert = f.flag("invert", false);
    out.push_back(std::move(step));
  } else if (type == "Digits") {  // \p{N} is Rust's char::is_numeric (Nd, Nl, No)
    SplitStep step;
    step.pattern = std::make_unique<Regex>(f.flag("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)", false, f.name);
    out.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    ByteLevelStep step;
    step.add_prefix_space = f.flag("add_prefix_space", true);  // HF's defaults when the keys are absent
    if (f.flag("use_regex", true)) step.gpt2_split = std::make_unique<Regex>(kGpt2Pattern, false, "GPT-2 pattern");
    out.push_back(std::move(step));
  } else if (type == "Metaspace") {
    MetaspaceStep step;
    step.replacement = f.character("replacement", "\xE2\x96\x81");
    step.prepend_scheme = parse_prepend_scheme(f);
    step.split = f.flag("split", true);
    out.push_back(std::move(step));
  } else {
    f.unsupported(fmt::format(".type \"{}\" (ding supports Split, ByteLevel, Metaspace, Digits and Sequence)", type));
  }
}

void parse_decoder(const Field& f, std::vector<Decoder>& out) {
  const std::string type = f.type();
  if (type == "Sequence") {
    for (size_t i = 0; i < f.array("decoders").size(); ++i) {
      parse_decoder(f.item("decoders", i), out);
      check_step_count(f, "decoders", out.size());
    }
  } else if (type == "ByteLevel") {
    out.push_back(ByteLevelDecoder{});
  } else if (type == "ByteFallback") {
    out.push_back(ByteFallbackDecoder{});
  } else if (type == "Fuse") {
    out.push_back(FuseDecoder{});
  } else if (type == "Strip") {
    const std::string content = f.character("content", " ");
    out.push_back(StripDecoder{code_point_at(content, 0), f.count("start"), f.count("stop")});
  } else if (type == "Replace") {
    out.push_back(parse_pattern(f, f.string("content")));
  } else if (type == "Metaspace") {
    out.push_back(MetaspaceDecoder{f.character("replacement", "\xE2\x96\x81"), parse_prepend_scheme(f)});
  } else {
    f.unsupported(fmt::format(".type \"{}\" (ding supports ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace and Sequence)", type));
  }
}

// Only the single-sequence template matters to encode; ids are checked against the vocabulary later.
PostProcessor parse_post_processor(const Field& f) {
  const std::string type = f.type();
  if (type == "ByteLevel") return {};  // it only adjusts offsets
  if (type == "Sequence") {
    PostProcessor all;
    for (size_t i = 0; i < f.array("processors").size(); ++i) {
      const PostProcessor p = parse_post_processor(f.item("processors", i));
      all.before.insert(all.before.begin(), p.before.begin(), p.before.end());
      all.after.insert(all.after.end(), p.after.begin(), p.after.end());
    }
    return all;
  }
  if (type != "TemplateProcessing")
    f.unsupported(fmt::format(".type \"{}\" (ding supports TemplateProcessing, ByteLevel and Sequence)", type));
  const json& specials = f.has("special_tokens") ? f.j["special_tokens"] : json::object();
  if (!specials.is_object()) f.fail(".special_tokens is not an object");
  PostProcessor p;
  bool seen_sequence = false;
  for (size_t i = 0; i < f.array("single").size(); ++i) {
    const Field piece = f.item("single", i);
    if (piece.has("Sequence")) {
      const std::string id = piece.member("Sequence").string("id");
      if (id != "A" || seen_sequence) piece.fail(fmt::format(": the single template has sequence {} (only one A is possible)", id));
      seen_sequence = true;
    } else if (piece.has("SpecialToken")) {
      const std::string name = piece.member("SpecialToken").string("id");
      if (!specials.contains(name) || !specials[name].is_object() || !specials[name].contains("ids") ||
          !specials[name]["ids"].is_array())
        piece.fail(fmt::format(": special token {} has no ids in special_tokens", json_excerpt(json(name))));
      for (const json& id : specials[name]["ids"]) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxTokenId)
          piece.fail(fmt::format(": special token {} has id {}", json_excerpt(json(name)), json_excerpt(id)));
        (seen_sequence ? p.after : p.before).push_back(id.get<Token>());
      }
    } else {
      piece.fail(fmt::format(" is not {{\"Sequence\": ...}} or {{\"SpecialToken\": ...}} but {}", json_excerpt(piece.j)));
    }
  }
  if (!seen_sequence) f.fail(".single has no {\"Sequence\": {\"id\": \"A\"}}");
  return p;
}

Token checked_id(const json& value, const std::string& where) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() >= kMaxTokenId)
    throw Error(ErrorCode::parse, fmt::format("{} has id {}; ids are integers in [0, {})", where, json_excerpt(value), kMaxTokenId));
  return value.get<Token>();
}

// vocab: {spelling: id}, into the map the model reads and the spellings decode reads.
std::unordered_map<std::string, Token> parse_vocab(const json& vocab, const std::string& where, Tokenizer::Impl& impl) {
  if (!vocab.is_object())
    throw Error(ErrorCode::parse, fmt::format("{}: vocabulary is not a JSON object but {}", where, vocab.type_name()));
  std::unordered_map<std::string, Token> map;
  map.reserve(vocab.size());
  for (const auto& [spelling, value] : vocab.items()) {
    const Token id = checked_id(value, fmt::format("{}: token {}", where, json_excerpt(json(spelling))));
    if (size_t(id) >= impl.spelling.size()) {
      impl.spelling.resize(size_t(id) + 1);
      impl.defined.resize(size_t(id) + 1);
    }
    if (impl.defined[id])
      throw Error(ErrorCode::parse, fmt::format("{}: id {} is given to both {} and {}", where, id,
                                                json_excerpt(json(impl.spelling[id])), json_excerpt(json(spelling))));
    impl.spelling[id] = spelling;
    impl.defined[id] = true;
    map.emplace(spelling, id);
  }
  return map;
}

// After the model: added tokens take their ids (the content wins over a vocabulary spelling of
// the same id, as in HF), and the two matchers are built over the final list.
void add_tokens(Tokenizer::Impl& impl, std::vector<AddedToken> tokens, const std::unordered_map<std::string, Token>& vocab) {
  impl.added = std::move(tokens);
  impl.special.assign(impl.spelling.size(), false);
  for (const AddedToken& t : impl.added) {
    if (size_t(t.id) >= impl.spelling.size()) {
      impl.spelling.resize(size_t(t.id) + 1);
      impl.defined.resize(size_t(t.id) + 1);
      impl.special.resize(size_t(t.id) + 1);
    }
    impl.defined[t.id] = true;
    impl.special[t.id] = t.special;
    impl.spelling[t.id] = t.content;
  }
  impl.special.resize(impl.spelling.size());
  for (const auto& [spelling, id] : vocab) impl.id_of.emplace(spelling, id);
  MatchScratch scratch;
  for (const AddedToken& t : impl.added) {
    impl.id_of.insert_or_assign(t.content, t.id);
    if (!t.normalized || impl.normalizers.empty()) {
      (t.normalized ? impl.normalized_added : impl.raw_added).add(t, t.content);
      continue;
    }
    // Matched in normalized text, so its content is normalized too; HF decodes it that way.
    std::string pattern = normalize(impl.normalizers, t.content, scratch);
    impl.spelling[t.id] = pattern;
    impl.normalized_added.add(t, std::move(pattern));
  }
  if (auto it = impl.id_of.find(kEndOfText); it != impl.id_of.end()) impl.eos = it->second;
}

std::vector<Bpe::Merge> parse_merges(const json& merges, const std::string& path) {
  if (!merges.is_array()) throw Error(ErrorCode::parse, fmt::format("{}: model.merges is not an array", path));
  std::vector<Bpe::Merge> out;
  out.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    // Two spellings appear in the wild: "a b" (older files) and ["a", "b"] (newer, which also
    // allows tokens that contain a space).
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space != std::string::npos && space > 0 && space + 1 < s.size() && s.find(' ', space + 1) == std::string::npos) {
        out.push_back({s.substr(0, space), s.substr(space + 1)});
        continue;
      }
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out.push_back({m[0].get<std::string>(), m[1].get<std::string>()});
      continue;
    }
    throw Error(ErrorCode::parse, fmt::format("{}: model.merges[{}] is not \"a b\" or [\"a\", \"b\"] but {}", path, i, json_excerpt(m)));
  }
  return out;
}

std::vector<AddedToken> parse_added_tokens(const json& file, const std::string& path) {
  const json& added = file.contains("added_tokens") && !file["added_tokens"].is_null() ? file["added_tokens"] : json::array();
  if (!added.is_array()) throw Error(ErrorCode::parse, fmt::format("{}: added_tokens is not an array", path));
  std::vector<AddedToken> tokens;
  for (size_t i = 0; i < added.size(); ++i) {
    const Field f{added[i], path, fmt::format("added_tokens[{}]", i)};
    if (!added[i].is_object() || !f.has("id")) f.fail(fmt::format(" needs an id and a content, not {}", json_excerpt(added[i])));
    AddedToken t;
    t.id = checked_id(added[i]["id"], fmt::format("{}: {}", path, f.name));
    t.content = f.string("content");
    if (t.content.empty()) f.fail(" has an empty content");
    t.special = f.flag("special", false);
    t.single_word = f.flag("single_word", false);
    t.lstrip = f.flag("lstrip", false);
    t.rstrip = f.flag("rstrip", false);
    t.normalized = f.flag("normalized", !t.special);  // HF's default for a token added without the flag
    tokens.push_back(std::move(t));
  }
  return tokens;
}

// What the model is, checked before anything else: it decides whether the rest matters.
void check_model_supported(const Field& model) {
  const std::string type = model.has("type") ? model.type() : "BPE";  // old files omit it
  if (type != "BPE") model.unsupported(fmt::format(".type \"{}\" (ding supports BPE)", type));
  if (model.has("dropout") && model.j["dropout"] != 0)
    model.unsupported(fmt::format(".dropout {} (encoding would not be deterministic)", json_excerpt(model.j["dropout"])));
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!model.string(affix, "").empty()) model.unsupported(fmt::format(".{} {}", affix, json_excerpt(model.j[affix])));
}

// The model's options; the vocabulary and merges are read by the caller.
Bpe::Options parse_bpe_options(const Field& model, bool byte_level, const std::unordered_map<std::string, Token>& vocab) {
  Bpe::Options options;
  options.byte_level = byte_level;
  options.byte_fallback = model.flag("byte_fallback", false);
  options.fuse_unk = model.flag("fuse_unk", false);
  options.ignore_merges = model.flag("ignore_merges", false);
  if (model.has("unk_token")) {
    const std::string unk = model.string("unk_token");
    auto it = vocab.find(unk);
    if (it == vocab.end()) model.fail(fmt::format(".unk_token {} is not in the vocabulary", json_excerpt(json(unk))));
    options.unk = it->second;
  }
  return options;
}

std::unique_ptr<Tokenizer::Impl> parse_tokenizer_json(const json& file, const std::string& path) {
  if (!file.is_object()) throw Error(ErrorCode::parse, fmt::format("{}: not a JSON object", path));
  if (!file.contains("model") || !file["model"].is_object()) throw Error(ErrorCode::parse, fmt::format("{}: no \"model\" object", path));
  const Field model{file["model"], path, "model"};
  check_model_supported(model);
  auto impl = std::make_unique<Tokenizer::Impl>();

  if (file.contains("normalizer") && !file["normalizer"].is_null()) parse_normalizer({file["normalizer"], path, "normalizer"}, impl->normalizers);
  if (file.contains("pre_tokenizer") && !file["pre_tokenizer"].is_null())
    parse_pre_tokenizer({file["pre_tokenizer"], path, "pre_tokenizer"}, impl->pre_tokenizer);
  // ByteLevel turns pieces into bytes, which no later step is written for.
  const auto is_byte_level = [](const PreTokenizerStep& s) { return std::holds_alternative<ByteLevelStep>(s); };
  const auto byte_level_steps = std::count_if(impl->pre_tokenizer.begin(), impl->pre_tokenizer.end(), is_byte_level);
  if (byte_level_steps > 1 || (byte_level_steps == 1 && !is_byte_level(impl->pre_tokenizer.back())))
    throw Error(ErrorCode::not_implemented,
                fmt::format("{}: a pre_tokenizer with a step after ByteLevel or two ByteLevel steps is not supported", path));
  if (file.contains("decoder") && !file["decoder"].is_null()) parse_decoder({file["decoder"], path, "decoder"}, impl->decoders);
  if (file.contains("post_processor") && !file["post_processor"].is_null())
    impl->post_processor = parse_post_processor({file["post_processor"], path, "post_processor"});

  if (!model.has("vocab")) model.fail(" has no \"vocab\"");
  const auto vocab = parse_vocab(model.j["vocab"], path + ": model.vocab", *impl);
  const Bpe::Options options = parse_bpe_options(model, byte_level_steps == 1, vocab);
  const auto merges = parse_merges(model.has("merges") ? model.j["merges"] : json::array(), path);
  impl->model = std::make_unique<Bpe>(vocab, merges, options, path + ": model.vocab",
                                      [&](size_t i) { return fmt::format("{}: model.merges[{}]", path, i); });
  add_tokens(*impl, parse_added_tokens(file, path), vocab);

  const PostProcessor& p = impl->post_processor;
  for (const std::vector<Token>* ids : {&p.before, &p.after})
    for (Token id : *ids)
      if (size_t(id) >= impl->defined.size() || !impl->defined[id])
        throw Error(ErrorCode::parse, fmt::format("{}: post_processor adds token id {}, which is not in the vocabulary", path, id));
  if (p.before.size() == 1) impl->bos = p.before[0];
  return impl;
}

// merges.txt line numbers, for errors: entry i is on line i + 1 + (lines skipped before it).
// Recounting here keeps the reader simple; it only runs when a merge is bad.
std::string merges_txt_location(const std::string& path, size_t index) {
  std::istringstream in(read_text_file(path));
  std::string line;
  size_t seen = 0;
  for (size_t line_number = 1; std::getline(in, line); ++line_number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.starts_with("#version")) continue;
    if (seen++ == index) return fmt::format("{}:{}", path, line_number);
  }
  return path;
}

std::vector<Bpe::Merge> read_merges_txt(const std::string& path) {
  std::istringstream in(read_text_file(path));
  std::vector<Bpe::Merge> merges;
  std::string line;
  for (size_t line_number = 1; std::getline(in, line); ++line_number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == line.size() || line.find(' ', space + 1) != std::string::npos)
      throw Error(ErrorCode::parse, fmt::format("{}:{}: a merge is two tokens separated by one space, not {}", path,
                                                line_number, json_excerpt(json(line))));
    merges.push_back({line.substr(0, space), line.substr(space + 1)});
  }
  if (merges.empty()) throw Error(ErrorCode::parse, fmt::format("{}: no merges (a byte-level BPE tokenizer needs its merge list)", path));
  return merges;
}

// tokenizer_config.json spells a token as a string or as an AddedToken object; null means
// none, and an absent key keeps what the tokenizer file implies.
void read_config_token(const json& config, const char* key, const Tokenizer::Impl& impl, const std::string& path,
                       std::optional<Token>& token) {
  if (!config.contains(key)) return;
  const json& v = config[key];
  if (v.is_null()) return token.reset();
  const json& content = v.is_object() && v.contains("content") ? v["content"] : v;
  if (!content.is_string()) throw Error(ErrorCode::parse, fmt::format("{}: {} is not a token but {}", path, key, json_excerpt(v)));
  auto it = impl.id_of.find(content.get<std::string>());
  if (it == impl.id_of.end())
    throw Error(ErrorCode::parse, fmt::format("{}: {} {} is not a token of the tokenizer", path, key, json_excerpt(content)));
  token = it->second;
}

}  // namespace

std::unique_ptr<Tokenizer::Impl> load_tokenizer_json(const std::string& path) {
  // The checks name the usual mistakes; this catches a field of an unexpected JSON type that
  // they do not look at.
  try {
    return parse_tokenizer_json(read_json(path), path);
  } catch (const json::exception& e) {
    throw Error(ErrorCode::parse, fmt::format("{}: a field has the wrong JSON type: {}", path, e.what()));
  }
}

std::unique_ptr<Tokenizer::Impl> load_vocab_merges(const std::string& vocab_json, const std::string& merges_txt) {
  auto impl = std::make_unique<Tokenizer::Impl>();
  const auto vocab = parse_vocab(read_json(vocab_json), vocab_json, *impl);
  Bpe::Options options;
  options.byte_level = true;
  impl->model = std::make_unique<Bpe>(vocab, read_merges_txt(merges_txt), options, vocab_json,
                                      [&](size_t i) { return merges_txt_location(merges_txt, i); });
  // GPT-2's regex with no prefix space: what GPT2Tokenizer and GPT2TokenizerFast do by default.
  ByteLevelStep byte_level;
  byte_level.gpt2_split = std::make_unique<Regex>(kGpt2Pattern, false, "GPT-2 pattern");
  impl->pre_tokenizer.push_back(std::move(byte_level));
  impl->decoders.push_back(ByteLevelDecoder{});
  std::vector<AddedToken> added;
  if (auto it = vocab.find(kEndOfText); it != vocab.end()) added.push_back({.content = kEndOfText, .id = it->second, .special = true});
  add_tokens(*impl, std::move(added), vocab);
  return impl;
}

void load_tokenizer_config(Tokenizer::Impl& impl, const std::string& path) {
  const json config = read_json(path);
  if (!config.is_object()) throw Error(ErrorCode::parse, fmt::format("{}: not a JSON object", path));
  read_config_token(config, "bos_token", impl, path, impl.bos);
  read_config_token(config, "eos_token", impl, path, impl.eos);
}

}  // namespace ding::tok
