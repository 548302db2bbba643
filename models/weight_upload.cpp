// Weight upload as a pipeline over the arena. The arena's bytes are cut into chunks; each chunk is
// converted by every core into a page-locked staging buffer (or, on a device whose memory is host
// memory, straight into the arena) and its copy is queued; the next chunk is converted into the
// other staging buffer while that copy runs. The stored pages a chunk consumed are released as it
// finishes, so the process never holds much more of the files than one chunk's worth.
#include "weight_upload.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>

#include "ding/error.h"
#include "weight_convert.h"

namespace ding {

namespace {

constexpr size_t kTaskBytes = size_t(256) << 10; // destination bytes one thread converts at a time
constexpr int64_t kTaskRows = 64;               // transposed tasks: destination rows (stored columns)

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return s + "]";
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The element at `offset` of a row-major tensor of `shape`, as "[i, j, …]".
std::string index_text(const std::vector<int64_t>& shape, int64_t offset) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] ? offset % shape[d] : 0;
    offset = shape[d] ? offset / shape[d] : 0;
  }
  return shape_text(index);
}

// What one part (or a generated weight) puts in the arena: `units` runs of `unit_elements`
// destination elements from byte `offset` on. A straight part's unit is one element: its values
// are contiguous in the file and in the arena alike. A transposed part's unit is one destination
// row, which gathers one column of the stored [K, N] matrix.
struct Segment {
  size_t plan = 0;
  int part = -1;  // -1: generated
  bool transposed = false;
  int64_t stored_begin = 0;  // a straight part's first element in its stored tensor (its row range's start)
  int64_t units = 0;
  int64_t unit_elements = 1;
  size_t offset = 0;
};

struct Piece {
  const Segment* segment;
  int64_t begin, end;  // units of the segment
};

// Arena bytes [begin, end), and the pieces of segments inside them.
struct Chunk {
  size_t begin = 0, end = 0;
  std::vector<Piece> pieces;
};

// What one thread converts: units [begin, end) of a piece; of a transposed piece, only the
// destination columns [col_begin, col_end) of those rows.
struct Task {
  const Piece* piece;
  int64_t begin, end, col_begin, col_end;
};

// A value that did not convert: its plan, part and offset in the stored tensor (the element's
// index, for a generated weight); offset -1: the part's bytes could not be read (mapped_read).
struct Refusal {
  size_t plan = SIZE_MAX;
  int part = 0;
  int64_t offset = 0;
  bool operator<(const Refusal& o) const {
    return plan != o.plan ? plan < o.plan : part != o.part ? part < o.part : offset < o.offset;
  }
};

// q[i] as f32, i < n (i8: the integer; f8e4m3: its value, NaN for its NaN codes).
void widen_eight_bit(float* out, const void* q, DType dtype, int64_t n) {
  if (dtype == DType::i8) {
    const auto* v = static_cast<const int8_t*>(q);
    for (int64_t i = 0; i < n; ++i) out[i] = float(v[i]);
  } else {
    const auto* v = static_cast<const f8e4m3*>(q);
    for (int64_t i = 0; i < n; ++i) out[i] = f8e4m3_to_f32(v[i]);
  }
}

// A counter-based generator (splitmix64's output function on a Weyl sequence): the value at any
// index is computed on its own, so threads fill any part of a weight in any order.
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Elements 2j and 2j + 1 of a normal weight: one Box–Muller pair from 24-bit uniforms
// (u1 ∈ (0, 1] so the logarithm is finite; the draws stop at √(2 · 24 ln 2) ≈ 5.8 σ).
std::array<float, 2> normal_pair(uint64_t key, int64_t j) {
  const uint64_t bits = splitmix64(key + uint64_t(j) * 0x9e3779b97f4a7c15ull);
  const float u1 = float((bits >> 40) + 1) * 0x1p-24f;
  const float u2 = float(bits & 0xffffffu) * 0x1p-24f;
  const float r = std::sqrt(-2.0f * std::log(u1));
  const float theta = 6.28318530717958647692f * u2;
  return {r * std::cos(theta), r * std::sin(theta)};
}

class Upload {
 public:
  Upload(Device& device, std::span<WeightPlan> plans, const UploadOptions& options)
      : device_(device), plans_(plans), options_(options), dtype_size_(dtype_size(options.dtype)) {}

  void check() const;
  UploadStats run(Buffer& arena);

 private:
  void lay_out();
  std::vector<Chunk> make_chunks(size_t capacity) const;
  std::vector<Task> make_tasks(const Chunk& chunk) const;
  // Converts the chunk into `out` (which holds arena bytes [chunk.begin, chunk.end)).
  void convert(const Chunk& chunk, char* out) const;
  bool run_task(const Task& task, char* out, size_t out_begin, Refusal& refusal) const;
  bool generate(const Segment& s, int64_t begin, int64_t end, char* out, Refusal& refusal) const;
  [[noreturn]] void throw_refused(const Refusal& r) const;
  template <class F>
  void for_stored_bytes(const Chunk& chunk, bool first, F&& f) const;

  Device& device_;
  std::span<WeightPlan> plans_;
  const UploadOptions& options_;
  const size_t dtype_size_;
  std::vector<size_t> plan_offsets_;
  std::vector<Segment> segments_;
  size_t total_ = 0;
  std::map<std::pair<size_t, int>, std::vector<float>> scales_;  // of the 8-bit parts: (plan, part) → read_scales
};

void Upload::check() const {
  const DType d = options_.dtype;
  if (d != DType::f32 && d != DType::f16 && d != DType::bf16)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("upload_weights: the compute dtype must be f32, f16 or bf16, got {}", dtype_name(d)));
  if (options_.chunk_bytes == 0) throw Error(ErrorCode::invalid_argument, "upload_weights: chunk_bytes is 0");
  for (const WeightPlan& plan : plans_) {
    const std::string& name = plan.name;
    if (plan.target == nullptr)
      throw Error(ErrorCode::invalid_argument, fmt::format("upload_weights: weight '{}' has no target tensor", name));
    if (plan.shape.empty() || plan.shape.size() > size_t(kMaxRank))
      throw Error(ErrorCode::invalid_argument, fmt::format("upload_weights: weight '{}' has rank {}, expected 1 to {}",
                                                           name, plan.shape.size(), kMaxRank));
    int64_t elements = 1;
    size_t bytes = 0;
    for (int64_t extent : plan.shape) {
      if (extent < 0)
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("upload_weights: weight '{}' has a negative extent in {}", name, shape_text(plan.shape)));
      if (__builtin_mul_overflow(elements, extent, &elements))
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("upload_weights: weight '{}' {} has more than 2^63 elements", name, shape_text(plan.shape)));
    }
    if (__builtin_mul_overflow(size_t(elements), dtype_size_, &bytes) || bytes > (size_t(1) << 62))
      throw Error(ErrorCode::out_of_memory, fmt::format("upload_weights: weight '{}' {} in {} needs more than 2^62 bytes", name,
                                                        shape_text(plan.shape), dtype_name(d)));
    if (plan.init != WeightInit::stored) {
      if (!plan.parts.empty())
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("upload_weights: weight '{}' is generated but names {} stored parts", name, plan.parts.size()));
      if (plan.init == WeightInit::normal && !(std::isfinite(plan.normal_std) && plan.normal_std >= 0))
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("upload_weights: weight '{}' has normal_std {}, expected a finite σ ≥ 0", name, plan.normal_std));
      continue;
    }
    if (plan.parts.empty())
      throw Error(ErrorCode::invalid_argument, fmt::format("upload_weights: weight '{}' is stored but names no part", name));
    int64_t rows = 0;
    for (size_t i = 0; i < plan.parts.size(); ++i) {
      const WeightPart& part = plan.parts[i];
      if (part.tensor == nullptr)
        throw Error(ErrorCode::invalid_argument, fmt::format("upload_weights: weight '{}' part {} has no tensor", name, i));
      const StoredTensor& t = *part.tensor;
      const std::string where = fmt::format("{}: tensor '{}' {} (part {} of weight '{}' {})", t.file, t.name, t.shape_str(),
                                            i, name, shape_text(plan.shape));
      if (part.scales) {
        check_scales(part, where);
        if (part.transpose)
          throw Error(ErrorCode::parse, fmt::format("{}: an 8-bit tensor widens to the compute dtype only as stored, "
                                                    "not transposed", where));
      } else if (t.dtype != DType::f32 && t.dtype != DType::f16 && t.dtype != DType::bf16) {
        throw Error(ErrorCode::parse, fmt::format("{}: the dtype must be f32, f16 or bf16{}", where,
                                                  t.dtype == DType::i8 || t.dtype == DType::f8e4m3
                                                      ? " (8-bit weights need their scales: a quantization_config)"
                                                      : ""));
      }
      if (part.transpose) {
        if (t.shape.size() != 2 || plan.shape.size() != 2)
          throw Error(ErrorCode::parse, fmt::format("{}: only a 2-D tensor transposes into a 2-D weight", where));
        if (t.shape[0] != plan.shape[1])
          throw Error(ErrorCode::parse, fmt::format("{}: transposed, its rows are {} long, the weight's {}", where,
                                                    t.shape[0], plan.shape[1]));
        rows += t.shape[1];
        if (part.row_begin != 0 || part.row_end != -1)
          throw Error(ErrorCode::invalid_argument, fmt::format("{}: a transposed part takes the whole tensor", where));
      } else {
        if (t.shape.size() != plan.shape.size() || !std::equal(t.shape.begin() + 1, t.shape.end(), plan.shape.begin() + 1))
          throw Error(ErrorCode::parse, fmt::format("{}: the shapes differ after dim 0", where));
        const int64_t end = part.row_end < 0 ? t.shape[0] : part.row_end;
        if (part.row_begin < 0 || part.row_begin > end || end > t.shape[0] || (part.row_end < 0 && part.row_end != -1))
          throw Error(ErrorCode::parse, fmt::format("{}: rows [{}, {}) are not within its {} rows", where, part.row_begin,
                                                    part.row_end, t.shape[0]));
        rows += part.rows();
      }
    }
    if (rows != plan.shape[0]) {
      std::string parts;
      for (const WeightPart& p : plan.parts)
        parts += fmt::format("{}'{}' {}{}", parts.empty() ? "" : ", ", p.tensor->name, p.tensor->shape_str(),
                             p.transpose ? " transposed" : "");
      throw Error(ErrorCode::parse, fmt::format("{}: weight '{}' {} concatenates {} to {} rows, not {}",
                                                plan.parts[0].tensor->file, name, shape_text(plan.shape), parts, rows,
                                                plan.shape[0]));
    }
  }
}

void Upload::lay_out() {
  size_t offset = 0;
  for (size_t i = 0; i < plans_.size(); ++i) {
    const WeightPlan& plan = plans_[i];
    plan_offsets_.push_back(offset);
    if (plan.init != WeightInit::stored) {
      segments_.push_back({.plan = i, .units = numel(plan.shape), .offset = offset});
    } else {
      size_t at = offset;
      for (size_t p = 0; p < plan.parts.size(); ++p) {
        const StoredTensor& t = *plan.parts[p].tensor;
        const WeightPart& part = plan.parts[p];
        const int64_t row_elements = t.shape.empty() || t.shape[0] == 0 ? 1 : t.numel() / t.shape[0];
        Segment s{.plan = i, .part = int(p), .transposed = part.transpose, .stored_begin = part.row_begin * row_elements,
                  .offset = at};
        s.units = s.transposed ? t.shape[1] : part.rows() * row_elements;
        s.unit_elements = s.transposed ? t.shape[0] : 1;
        segments_.push_back(s);
        at += size_t(s.units * s.unit_elements) * dtype_size_;
      }
    }
    // check() bounds each weight by 2^62 bytes; their sum is bounded here, before any allocation.
    const size_t padded = (size_t(numel(plan.shape)) * dtype_size_ + kWeightAlignment - 1) / kWeightAlignment * kWeightAlignment;
    if (__builtin_add_overflow(offset, padded, &offset) || offset > (size_t(1) << 62))
      throw Error(ErrorCode::out_of_memory,
                  fmt::format("upload_weights: the weights up to '{}' need more than 2^62 bytes", plan.name));
  }
  total_ = offset;
}

// Greedy: each chunk takes units while they fit in `capacity` bytes from its start. A transposed
// part is cut at a multiple of 8 rows where it can be, so the 8 × 8 transposes see whole tiles.
std::vector<Chunk> Upload::make_chunks(size_t capacity) const {
  std::vector<Chunk> chunks;
  Chunk current;
  for (const Segment& s : segments_) {
    const size_t unit_bytes = size_t(s.unit_elements) * dtype_size_;
    for (int64_t done = 0; done < s.units;) {
      const size_t at = s.offset + size_t(done) * unit_bytes;
      if (current.pieces.empty()) current.begin = at;
      const size_t room = capacity - std::min(capacity, at - current.begin);
      int64_t take = std::min<int64_t>(s.units - done, int64_t(room / std::max<size_t>(unit_bytes, 1)));
      if (s.transposed && take < s.units - done && take >= 8) take = take / 8 * 8;
      if (take == 0) {  // capacity holds at least one unit, so the chunk is not empty
        chunks.push_back(std::move(current));
        current = Chunk{};
        continue;
      }
      current.pieces.push_back({&s, done, done + take});
      current.end = at + size_t(take) * unit_bytes;
      done += take;
    }
  }
  if (!current.pieces.empty()) chunks.push_back(std::move(current));
  return chunks;
}

std::vector<Task> Upload::make_tasks(const Chunk& chunk) const {
  std::vector<Task> tasks;
  for (const Piece& p : chunk.pieces) {
    const Segment& s = *p.segment;
    if (s.transposed) {
      const int64_t width = s.unit_elements;
      const int64_t cols = std::max<int64_t>(64, int64_t(kTaskBytes / (size_t(kTaskRows) * dtype_size_)));
      for (int64_t r = p.begin; r < p.end; r += kTaskRows)
        for (int64_t c = 0; c < width; c += cols)
          tasks.push_back({&p, r, std::min(r + kTaskRows, p.end), c, std::min(c + cols, width)});
    } else {
      const int64_t n = int64_t(kTaskBytes / dtype_size_);
      for (int64_t e = p.begin; e < p.end; e += n) tasks.push_back({&p, e, std::min(e + n, p.end), 0, 0});
    }
  }
  return tasks;
}

bool Upload::generate(const Segment& s, int64_t begin, int64_t end, char* out, Refusal& refusal) const {
  const WeightPlan& plan = plans_[s.plan];
  if (plan.init == WeightInit::zeros) {
    std::memset(out, 0, size_t(end - begin) * dtype_size_);
    return true;
  }
  const uint64_t key = splitmix64(options_.seed ^ splitmix64(s.plan));
  constexpr int64_t kBlock = 512;
  float values[kBlock];
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t n = std::min(kBlock, end - b);
    if (plan.init == WeightInit::ones) {
      std::fill(values, values + n, 1.0f);
    } else {
      for (int64_t k = 0; k < n;) {
        const int64_t i = b + k;
        const std::array<float, 2> z = normal_pair(key, i / 2);
        for (int64_t half = i % 2; half < 2 && k < n; ++half) values[k++] = plan.normal_std * z[size_t(half)];
      }
    }
    if (!weight_convert(out + size_t(b - begin) * dtype_size_, options_.dtype, values, DType::f32, n)) {
      refusal = {s.plan, -1, b + weight_first_refused(values, DType::f32, options_.dtype, n, 1, n)};
      return false;
    }
  }
  return true;
}

// `out` holds arena bytes from `out_begin` on.
bool Upload::run_task(const Task& task, char* out, size_t out_begin, Refusal& refusal) const {
  const Segment& s = *task.piece->segment;
  if (s.part < 0) return generate(s, task.begin, task.end, out + (s.offset + size_t(task.begin) * dtype_size_ - out_begin), refusal);
  const StoredTensor& t = *plans_[s.plan].parts[size_t(s.part)].tensor;
  const char* stored = static_cast<const char*>(t.data);
  const size_t stored_size = dtype_size(t.dtype);
  if (!s.transposed) {
    const int64_t n = task.end - task.begin;
    const char* src = stored + size_t(s.stored_begin + task.begin) * stored_size;
    char* dst = out + (s.offset + size_t(task.begin) * dtype_size_ - out_begin);
    const float shift = plans_[s.plan].stored_offset;
    if (const auto scaled = scales_.find({s.plan, s.part}); scaled != scales_.end()) {
      // value[r, c] = q[r, c] · scale of its block, through f32 to the one rounding.
      const WeightPart& part = plans_[s.plan].parts[size_t(s.part)];
      const int64_t C = t.shape[1], first = s.stored_begin + task.begin;
      const int64_t block_cols = (C + part.block_cols - 1) / part.block_cols;
      std::vector<float> wide(static_cast<size_t>(n));
      widen_eight_bit(wide.data(), src, t.dtype, n);
      // Row by row from the task's first element: one division per row, not per element.
      for (int64_t i = 0, r = first / C, c = first % C; i < n; ++r, c = 0) {
        const float* row_scales = scaled->second.data() + r / part.block_rows * block_cols;
        for (; c < C && i < n; ++c, ++i) wide[size_t(i)] *= row_scales[c / part.block_cols];
      }
      if (weight_convert(dst, options_.dtype, wide.data(), DType::f32, n) || !options_.check_values) return true;
      refusal = {s.plan, s.part, first + weight_first_refused(wide.data(), DType::f32, options_.dtype, n, 1, n)};
      return false;
    }
    if (shift != 0.0f) {  // small (norm weights): through f32, the offset added before the one rounding
      std::vector<float> shifted(static_cast<size_t>(n));
      weight_convert(shifted.data(), DType::f32, src, t.dtype, n);
      for (float& v : shifted) v += shift;
      if (weight_convert(dst, options_.dtype, shifted.data(), DType::f32, n) || !options_.check_values) return true;
    } else if (weight_convert(dst, options_.dtype, src, t.dtype, n) || !options_.check_values) {
      return true;
    }
    refusal = {s.plan, s.part, s.stored_begin + task.begin + weight_first_refused(src, t.dtype, options_.dtype, n, 1, n)};
    return false;
  }
  // Destination rows [begin, end) × columns [col_begin, col_end) of [N, K] from the stored [K, N].
  const int64_t K = t.shape[0], N = t.shape[1];
  const int64_t rows = task.end - task.begin, cols = task.col_end - task.col_begin;
  const int64_t corner = task.col_begin * N + task.begin;  // stored element at the block's corner
  char* dst = out + (s.offset + size_t(task.begin * K + task.col_begin) * dtype_size_ - out_begin);
  if (weight_convert_transposed(dst, options_.dtype, K, stored + size_t(corner) * stored_size, t.dtype, N, rows, cols) ||
      !options_.check_values)
    return true;
  refusal = {s.plan, s.part,
             corner + weight_first_refused(stored + size_t(corner) * stored_size, t.dtype, options_.dtype, N, cols, rows)};
  return false;
}

void Upload::convert(const Chunk& chunk, char* out) const {
  const std::vector<Task> tasks = make_tasks(chunk);
  Refusal first;
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < tasks.size(); ++i) {
    const Segment& s = *tasks[i].piece->segment;
    Refusal r;
    bool ok = false;
    if (s.part < 0) {
      ok = run_task(tasks[i], out, chunk.begin, r);
    } else {
      // A file shrunk under its mapping faults here, on whichever thread reads the lost pages.
      const StoredTensor& t = *plans_[s.plan].parts[size_t(s.part)].tensor;
      if (!mapped_read(t.data, t.bytes, [&] { ok = run_task(tasks[i], out, chunk.begin, r); }))
        r = {s.plan, s.part, -1};
    }
    if (!ok) {
#pragma omp critical(ding_weight_refusal)
      first = std::min(first, r);
    }
  }
  if (first.plan != SIZE_MAX) throw_refused(first);
}

void Upload::throw_refused(const Refusal& r) const {
  const WeightPlan& plan = plans_[r.plan];
  const DType d = options_.dtype;
  const char* largest = d == DType::f16 ? "65504" : d == DType::bf16 ? "3.3895e38" : "3.4028e38";
  if (r.part < 0)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("upload_weights: weight '{}' {} drawn from N(0, {}²) holds a value beyond {}'s largest {} at {}",
                            plan.name, shape_text(plan.shape), plan.normal_std, dtype_name(d), largest,
                            index_text(plan.shape, r.offset)));
  const StoredTensor& t = *plan.parts[size_t(r.part)].tensor;
  double v = 0;
  if (r.offset < 0 || !mapped_read(t.data, t.bytes, [&] { v = load_element(t.data, t.dtype, r.offset); }))
    throw_mapped_read_failed(t);
  const std::string value = std::isnan(v)   ? "NaN"
                            : std::isinf(v) ? (v > 0 ? "+Inf" : "-Inf")
                                            : fmt::format("{}, beyond {}'s largest finite value {}", v, dtype_name(d), largest);
  throw Error(ErrorCode::parse, fmt::format("{}: tensor '{}' {} holds {} at element {}{}", t.file, t.name, t.shape_str(), value,
                                            index_text(t.shape, r.offset),
                                            plan.name == t.name ? "" : fmt::format(" (weight '{}')", plan.name)));
}

// Calls f(data, bytes) with the stored bytes of each piece of a chunk: a straight piece its own
// range; a transposed piece, whose rows gather columns from the whole tensor, the tensor, once:
// with its first piece (`first`) or with its last.
template <class F>
void Upload::for_stored_bytes(const Chunk& chunk, bool first, F&& f) const {
  for (const Piece& p : chunk.pieces) {
    const Segment& s = *p.segment;
    if (s.part < 0) continue;
    const StoredTensor& t = *plans_[s.plan].parts[size_t(s.part)].tensor;
    const size_t size = dtype_size(t.dtype);
    if (!s.transposed)
      f(static_cast<const char*>(t.data) + size_t(s.stored_begin + p.begin) * size, size_t(p.end - p.begin) * size);
    else if (first ? p.begin == 0 : p.end == s.units) f(t.data, t.bytes);
  }
}

UploadStats Upload::run(Buffer& arena) {
  const auto start = std::chrono::steady_clock::now();
  lay_out();
  for (size_t i = 0; i < plans_.size(); ++i)
    for (size_t p = 0; p < plans_[i].parts.size(); ++p)
      if (plans_[i].parts[p].scales) scales_[{i, int(p)}] = read_scales(plans_[i].parts[p]);
  size_t largest_unit = 0;
  for (const Segment& s : segments_) largest_unit = std::max(largest_unit, size_t(s.unit_elements) * dtype_size_);
  const size_t capacity = std::max(std::min(options_.chunk_bytes, total_), largest_unit);
  const std::vector<Chunk> chunks = make_chunks(capacity);

  Buffer weights = device_.alloc(total_ + options_.reserve_bytes);
  char* base = static_cast<char*>(weights.data());
  // In place where device memory is host memory; else two staging buffers, so that chunk c is
  // converted into one while chunk c - 1 is copied from the other.
  const bool in_place = device_.caps().host_accessible;
  std::array<HostBuffer, 2> staging;
  if (!in_place && !chunks.empty())
    for (HostBuffer& b : staging) b = device_.alloc_staging(capacity);
  Stream& stream = device_.default_stream();
  try {
    if (!chunks.empty()) for_stored_bytes(chunks[0], true, mapped_will_need);
    for (size_t c = 0; c < chunks.size(); ++c) {
      const Chunk& chunk = chunks[c];
      if (c + 1 < chunks.size()) for_stored_bytes(chunks[c + 1], true, mapped_will_need);
      char* out = in_place ? base + chunk.begin : static_cast<char*>(staging[c % 2].data());
      convert(chunk, out);
      for_stored_bytes(chunk, false, mapped_release);
      if (!in_place) {
        // Waits for chunk c - 1's copy: then the buffer chunk c + 1 will be converted into is free.
        stream.synchronize();
        device_.copy_to_device(stream, base + chunk.begin, out, chunk.end - chunk.begin);
      }
      if (options_.progress) options_.progress(chunk.end, total_);
    }
    stream.synchronize();
  } catch (...) {
    // A queued copy may still read the staging buffers that unwinding is about to free.
    try {
      stream.synchronize();
    } catch (...) {
    }
    throw;
  }

  UploadStats stats;
  for (size_t i = 0; i < plans_.size(); ++i) {
    const WeightPlan& plan = plans_[i];
    *plan.target = Tensor::view(base + plan_offsets_[i], &device_, options_.dtype, plan.shape.data(), int(plan.shape.size()));
    stats.bytes_written += plan.target->nbytes();
    for (const WeightPart& part : plan.parts)
      stats.bytes_read += part.tensor->shape.empty() || part.tensor->shape[0] == 0
                              ? part.tensor->bytes
                              : part.tensor->bytes / size_t(part.tensor->shape[0]) * size_t(part.rows());
  }
  stats.reserved_at = total_;
  arena = std::move(weights);
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace

int64_t WeightPart::rows() const {
  if (tensor->shape.empty()) return 1;
  return (row_end < 0 ? tensor->shape[0] : row_end) - row_begin;
}

void check_scales(const WeightPart& part, const std::string& where) {
  const StoredTensor& t = *part.tensor;
  const StoredTensor& sc = *part.scales;
  if (t.dtype != DType::i8 && t.dtype != DType::f8e4m3)
    throw Error(ErrorCode::parse, fmt::format("{}: has scales ('{}'), so it must be i8 or f8e4m3", where, sc.name));
  if (t.shape.size() != 2) throw Error(ErrorCode::parse, fmt::format("{}: an 8-bit weight must be a matrix", where));
  if (part.block_rows <= 0 || part.block_cols <= 0)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: scale blocks of {} × {}", where, part.block_rows, part.block_cols));
  if (sc.dtype != DType::f32 && sc.dtype != DType::bf16 && sc.dtype != DType::f16)
    throw Error(ErrorCode::parse, fmt::format("{}: scales '{}' {} must be f32, bf16 or f16", sc.file, sc.name, sc.shape_str()));
  const int64_t rows = (t.shape[0] + part.block_rows - 1) / part.block_rows;
  const int64_t cols = (t.shape[1] + part.block_cols - 1) / part.block_cols;
  if (sc.numel() != rows * cols)
    throw Error(ErrorCode::parse,
                fmt::format("{}: scales '{}' {} hold {} values; '{}' {} in blocks of {} × {} needs {} × {}", sc.file, sc.name,
                            sc.shape_str(), sc.numel(), t.name, t.shape_str(), part.block_rows, part.block_cols, rows, cols));
}

std::vector<float> read_scales(const WeightPart& part) {
  const StoredTensor& sc = *part.scales;
  std::vector<float> scales(static_cast<size_t>(sc.numel()));
  const bool read = mapped_read(sc.data, sc.bytes, [&] {
    for (size_t i = 0; i < scales.size(); ++i) scales[i] = float(load_element(sc.data, sc.dtype, int64_t(i)));
  });
  if (!read) throw_mapped_read_failed(sc);
  for (size_t i = 0; i < scales.size(); ++i)
    if (!(std::isfinite(scales[i]) && scales[i] >= 0.0f))
      throw Error(ErrorCode::parse, fmt::format("{}: scales '{}' {} hold {} at index {}; a scale is finite and ≥ 0", sc.file,
                                                sc.name, sc.shape_str(), scales[i], i));
  return scales;
}

UploadStats upload_weights(Device& device, std::span<WeightPlan> plans, Buffer& arena, const UploadOptions& options) {
  Upload upload(device, plans, options);
  upload.check();
  return upload.run(arena);
}

}  // namespace ding
