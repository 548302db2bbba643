// Safetensors: memory-mapped model weights (https://github.com/huggingface/safetensors format:
// u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}}, data).
// Every header field is checked against the file before any byte is used: offsets inside the
// data section, size = dtype size × shape, no two tensors overlapping.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ding/dtype.h"

namespace ding {

struct StoredTensor {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // inside the mapping; valid while the file is open (read it through mapped_read)
  size_t bytes = 0;
  std::string file;            // for error messages
  size_t file_bytes = 0;       // the file's size when it was mapped

  int64_t numel() const;
  std::string shape_str() const;  // "[768, 2304] bf16"
};

// Paging hints for bytes of a mapping (a StoredTensor's data). The file is mapped without
// MAP_POPULATE: pages come in as they are read. will_need starts reading a range ahead of its use
// (a no-op for pages already in the page cache); release drops the whole pages inside a range
// from this process once they are consumed, so a load's resident memory stays near what is being
// converted (the page cache keeps them: reading the range again maps them again).
void mapped_will_need(const void* data, size_t bytes);
void mapped_release(const void* data, size_t bytes);

// Reading a mapping safely. A page of a mapping past the end of its file cannot be read: the
// access raises SIGBUS, which kills the process. That happens when another process truncates or
// shrinks a weights file while it is mapped (a download restarted, a checkpoint rewritten in
// place). mapped_read(data, bytes, read) calls read(), which reads mapped bytes inside
// [data, data + bytes), and returns true; should one of those reads fault, read() is abandoned
// where it stood and mapped_read returns false instead. Safe on any thread, OpenMP workers
// included: the fault is caught on the thread that made it.
//
// read() is left by siglongjmp, so it must hold nothing that needs destroying or releasing (no
// std::string, vector, lock) and may have written part of its output. A SIGBUS from anywhere
// else (another address, another thread, kill) goes to the handler that was installed before
// the first mapped_read, or kills the process as it would have.
bool mapped_read_impl(const void* data, size_t bytes, void (*read)(void*), void* context);
template <class F>
bool mapped_read(const void* data, size_t bytes, F&& read) {
  auto* f = &read;
  return mapped_read_impl(data, bytes, [](void* p) { (*static_cast<decltype(f)>(p))(); },
                          const_cast<void*>(static_cast<const void*>(f)));
}
// The error for a tensor whose bytes mapped_read could not read: Error(io) naming the file, the
// tensor, its byte range and the file's size then and now.
[[noreturn]] void throw_mapped_read_failed(const StoredTensor& t);

// A tensor for write_safetensors: its bytes (dtype size × the shape's elements) come from fill,
// which is not called for a tensor of no elements.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::function<void(char* bytes)> fill;
};

// Writes a .safetensors file: the header (the tensors in the order given, `metadata` as its
// __metadata__, padded to 8 bytes), then each tensor's bytes as fill produces them, one tensor in
// memory at a time. Error(io) naming the path when it cannot be written; Error(invalid_argument)
// for a dtype the format has no name for.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata);

// One mapped .safetensors file.
class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, StoredTensor>& tensors() const { return tensors_; }
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::map<std::string, StoredTensor> tensors_;
};

// All weights of a model folder: model.safetensors, or the shards named by
// model.safetensors.index.json ("weight_map": tensor name → shard file).
class WeightFiles {
 public:
  static WeightFiles open_folder(const std::string& dir);
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws Error(parse) naming the tensor and the folder when absent.
  const StoredTensor& get(const std::string& name) const;
  const std::map<std::string, const StoredTensor*>& tensors() const { return tensors_; }
  size_t total_bytes() const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const StoredTensor*> tensors_;
};

}  // namespace ding
