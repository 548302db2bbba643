// The tiny-f32 GPT-2 fixture (tools/fixtures/make_gpt2_fixtures.py) as the session and generate
// tests use it: its folder and the first n ids of its reference prompt.
#pragma once
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "ding/models/tokenizer.h"

namespace ding::testing {

inline const std::filesystem::path kTinyFixture = std::filesystem::path(DING_TEST_DATA) / "gpt2-fixtures" / "tiny-f32";

inline std::vector<Token> tiny_prompt_ids(size_t n) {
  std::ifstream in(kTinyFixture / "reference.json");
  auto ids = nlohmann::json::parse(in)["prompt_ids"].get<std::vector<Token>>();
  ids.resize(n);
  return ids;
}

}  // namespace ding::testing
