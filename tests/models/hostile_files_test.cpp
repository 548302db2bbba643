// Model folders whose files are not what they claim to be: a FIFO, a directory or a device where
// a file belongs, JSON nested without bound or followed by trailing bytes, an empty merge list.
// Each must end in a ding::Error naming the file, never a hang or a stack overflow.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "ding/ding.h"
#include "ding/models/model.h"
#include "ding/models/safetensors.h"
#include "expect_error.h"
#include "hostile/folder_edit.h"

namespace ding::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kTiny = fs::path(DING_TEST_DATA) / "gpt2-fixtures" / "tiny-f32";

using hostile::nested_array;
using hostile::read_all;
using hostile::Safetensors;
using hostile::write_all;

class HostileFolder : public ::testing::Test {
 protected:
  fs::path dir;
  void SetUp() override {
    dir = fs::temp_directory_path() /
          (std::string("ding_hostile_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::copy(kTiny, dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  void load() const { Model::load(dir.string(), Device::open("cpu")); }

  // Replaces `name` by a FIFO and loads the folder. A reader that opened the FIFO would block until
  // a writer comes: a watchdog thread plays that writer every 50 ms, so a regression fails here
  // (with the wrong error, and `blocked` set) instead of hanging the suite.
  void expect_fifo_refused(const char* name) const {
    const fs::path fifo = dir / name;
    fs::remove(fifo);
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
    std::atomic<bool> done{false}, blocked{false};
    std::thread watchdog([&] {
      while (!done) {
        const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // succeeds only with a reader waiting
        if (fd >= 0) {
          blocked = true;
          ::close(fd);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
    expect_error([&] { load(); }, ErrorCode::io, {name, "not a regular file (a FIFO)"});
    done = true;
    watchdog.join();
    EXPECT_FALSE(blocked) << name << " was opened for reading: open() would have blocked without a writer";
  }
};

TEST_F(HostileFolder, FifoAsConfigJson) { expect_fifo_refused("config.json"); }
TEST_F(HostileFolder, FifoAsModelSafetensors) { expect_fifo_refused("model.safetensors"); }
TEST_F(HostileFolder, FifoAsVocabJson) { expect_fifo_refused("vocab.json"); }
TEST_F(HostileFolder, FifoAsMergesTxt) { expect_fifo_refused("merges.txt"); }

TEST_F(HostileFolder, DirectoryAsConfigJson) {
  fs::remove(dir / "config.json");
  fs::create_directory(dir / "config.json");
  expect_error([&] { load(); }, ErrorCode::io, {"config.json", "not a regular file (a directory)"});
}

TEST_F(HostileFolder, DeviceAsVocabJson) {
  fs::remove(dir / "vocab.json");
  fs::create_symlink("/dev/zero", dir / "vocab.json");  // endless bytes: must not be read at all
  expect_error([&] { load(); }, ErrorCode::io, {"vocab.json", "not a regular file (a device)"});
}

// A 100,000-deep array where a number belongs: refused while parsing, before anything walks it.
TEST_F(HostileFolder, ConfigFieldNested100000Deep) {
  std::string text = read_all(dir / "config.json");
  const size_t at = text.find("\"n_head\"");
  ASSERT_NE(at, std::string::npos);
  text.insert(at, "\"n_inner\": " + nested_array(100000) + ", ");
  write_all(dir / "config.json", text);
  expect_error([&] { load(); }, ErrorCode::parse, {"config.json", "nested deeper than 64"});
}

TEST_F(HostileFolder, SafetensorsShapeNested100000Deep) {
  Safetensors st(dir / "model.safetensors");
  const nlohmann::json header = nlohmann::json::parse(st.header);
  const std::string name = header.begin().key() == "__metadata__" ? std::next(header.begin()).key() : header.begin().key();
  st.header = header.dump();
  const std::string shape = "\"shape\":" + header[name]["shape"].dump();
  const size_t at = st.header.find(shape, st.header.find("\"" + name + "\""));
  ASSERT_NE(at, std::string::npos);
  st.header.replace(at, shape.size(), "\"shape\":" + nested_array(100000));
  st.write(dir / "model.safetensors");
  expect_error([&] { load(); }, ErrorCode::parse, {"model.safetensors", "nested deeper than 64"});
}

// The JSON grammar ends at the closing brace: a NUL and garbage after it are an error, not ignored.
TEST_F(HostileFolder, ConfigJsonWithTrailingNulAndGarbage) {
  write_all(dir / "config.json", read_all(dir / "config.json") + std::string("\0garbage", 8));
  expect_error([&] { load(); }, ErrorCode::parse, {"config.json", "not valid JSON"});
}

TEST_F(HostileFolder, SafetensorsHeaderWithTrailingNul) {
  // The header grows by one NUL byte, which the data offsets (relative to the header's end) absorb.
  Safetensors st(dir / "model.safetensors");
  st.header += std::string(1, '\0');
  st.write(dir / "model.safetensors");
  expect_error([&] { load(); }, ErrorCode::parse, {"model.safetensors", "not valid JSON"});
}

// config.json with fewer layers than the checkpoint: refused, naming the first tensor past them,
// instead of running a model cut short.
TEST_F(HostileFolder, ConfigWithFewerLayersThanTheWeights) {
  nlohmann::json config = nlohmann::json::parse(read_all(dir / "config.json"));
  const int64_t layers = config.at("n_layer").get<int64_t>();
  ASSERT_GE(layers, 2);
  config["n_layer"] = layers - 1;
  write_all(dir / "config.json", config.dump());
  expect_error([&] { load(); }, ErrorCode::parse,
               {"belongs to layer " + std::to_string(layers - 1), "config.json has " + std::to_string(layers - 1) + " layers"});
}

TEST_F(HostileFolder, EmptyMergesTxt) {
  write_all(dir / "merges.txt", "#version: 0.2\n");
  expect_error([&] { load(); }, ErrorCode::parse, {"merges.txt", "no merges"});
}

// A pre-tokenizer Sequence of 10,000 steps (each would run over every piece of text): refused at
// load, as nesting is; a flat list needs its own bound.
TEST(HostileTokenizer, PreTokenizerSequenceOf10000Steps) {
  const fs::path dir = fs::temp_directory_path() / ("ding_hostile_tokenizer." + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::copy(fs::path(DING_TEST_DATA) / "tokenizers" / "llama3-bpe", dir);
  nlohmann::json t = nlohmann::json::parse(read_all(dir / "tokenizer.json"));
  nlohmann::json steps = nlohmann::json::array();
  for (int i = 0; i < 10000; ++i) steps.push_back({{"type", "Digits"}, {"individual_digits", true}});
  t["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", steps}};
  write_all(dir / "tokenizer.json", t.dump());
  expect_error([&] { Tokenizer::from_folder(dir.string()); }, ErrorCode::parse, {"tokenizer.json", "more than 64 steps"});
  fs::remove_all(dir);
}

// A safetensors file from a header text and a data section, for the cases a JSON writer cannot
// produce (a key twice) or a fixture would not hold.
fs::path write_safetensors(const std::string& name, const std::string& header, size_t data_bytes) {
  const fs::path path = fs::temp_directory_path() / ("ding_hostile_" + name + "." + std::to_string(getpid()) + ".safetensors");
  Safetensors(header, data_bytes).write(path);
  return path;
}

TEST(HostileSafetensors, TensorNamedTwice) {
  const fs::path p = write_safetensors("twice", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                                     "a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})", 16);
  expect_error([&] { SafetensorsFile::open(p.string()); }, ErrorCode::parse, {p.filename().string(), "\"a\" appears twice"});
  fs::remove(p);
}

// Sorted by start, an empty tensor between two overlapping ones hid the overlap from a check of
// neighbours.
TEST(HostileSafetensors, OverlapAcrossAnEmptyTensor) {
  const fs::path p = write_safetensors("overlap", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                                       "e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]},
                                                       "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12);
  expect_error([&] { SafetensorsFile::open(p.string()); }, ErrorCode::parse, {"'a' [0, 8]", "'b' [4, 12]", "overlap"});
  fs::remove(p);
}

// 2^40 · 2^23 elements of 4 bytes: 2^65 bytes, which wrapped to 0 and matched offsets [0, 0].
TEST(HostileSafetensors, ByteSizeWrappingPast2To64) {
  const fs::path p =
      write_safetensors("wrap", R"({"w": {"dtype": "F32", "shape": [1099511627776, 8388608], "data_offsets": [0, 0]}})", 0);
  expect_error([&] { SafetensorsFile::open(p.string()); }, ErrorCode::parse, {"'w'", "overflows"});
  fs::remove(p);
}

}  // namespace
}  // namespace ding::testing
