// The hostile corpus: corrupted model folders and command lines, written at test time from the
// committed fixtures (nothing large is committed). Each case names the class of hostile input it
// stands for and a text the one-line error must contain. hostile_corpus_test.cpp runs ding-run
// over every case under a time and memory limit.
#pragma once
#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace ding::testing::hostile {

struct Case {
  std::string name;   // also the folder's name
  std::string source; // the fixture folder it starts from (a copy is corrupted)
  std::function<void(const std::filesystem::path& dir)> corrupt;  // null: the folder as it is
  std::string args;     // ding-run's arguments after -m DIR (shell syntax)
  std::string mention;  // part of the expected error line
};

void PrintTo(const Case& c, std::ostream* os);  // gtest names a failing case by its name

// Every case. `root` receives a folder per case when build() runs.
std::vector<Case> cases();
// Writes the case's folder under `root` (a fresh copy of its source, then the corruption) and
// returns it.
std::filesystem::path build(const Case& c, const std::filesystem::path& root);

}  // namespace ding::testing::hostile
