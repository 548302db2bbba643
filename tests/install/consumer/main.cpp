// A program outside the ding tree: installed headers + find_package(ding) + one op.
#include <ding/ding.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main() try {
  ding::Device& dev = ding::Device::open("cpu");
  ding::Stream& stream = dev.default_stream();
  std::vector<float> x = {1, 2, 3, 4}, w = {1, 1, 1, 1}, y(4, -1);
  ding::Tensor tx = ding::Tensor::view(x.data(), &dev, ding::DType::f32, {1, 4});
  ding::Tensor tw = ding::Tensor::view(w.data(), &dev, ding::DType::f32, {4});
  ding::Tensor ty = ding::Tensor::view(y.data(), &dev, ding::DType::f32, {1, 4});
  const float eps = 1e-6f;
  ding::ops::rms_norm(stream, ty, tx, tw, {.eps = eps});
  const double rms = std::sqrt((1 + 4 + 9 + 16) / 4.0 + eps);
  for (int i = 0; i < 4; ++i)
    if (std::fabs(y[i] - (i + 1) / rms) > 1e-6) {
      std::printf("consumer: rms_norm gave %f at %d, expected %f\n", y[i], i, (i + 1) / rms);
      return 1;
    }
  try {
    ding::ops::rms_norm(stream, ty, tx, ding::Tensor::view(w.data(), &dev, ding::DType::f32, {3}));
    std::printf("consumer: a shape mismatch was not reported\n");
    return 1;
  } catch (const ding::Error& e) {
    std::printf("consumer: ok (%s; bad input -> \"%s\")\n", dev.caps().name.c_str(), e.what());
  }
  return 0;
} catch (const std::exception& e) {
  std::printf("consumer: unexpected error: %s\n", e.what());
  return 1;
}
