// Grow-only f32 scratch owned by the calling thread. A kernel borrows space per call and, once
// the largest call has been seen, never allocates again: the hot path of a decode loop stays
// allocation-free. A kernel uses a different slot for each buffer it holds at the same time;
// the space is valid until the same thread asks for that slot again.
#pragma once
#include <array>
#include <cstddef>
#include <vector>

namespace ding::cpu {

enum class ScratchSlot { first, second, third, fourth };

inline float* thread_scratch(ScratchSlot slot, size_t floats) {
  thread_local std::array<std::vector<float>, 4> buffers;
  std::vector<float>& b = buffers[size_t(slot)];
  if (b.size() < floats) b.resize(floats);
  return b.data();
}

}  // namespace ding::cpu
