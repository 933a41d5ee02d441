// Calls a layer of the library above the engine, qkv::nn::linear (oneDNN's matmul inside
// libqkv), on numbers checked by hand; exits non-zero on a mismatch. Built against an
// installed qkv by test_install.sh through qkv::qkv and qkv.pc; built against the engine
// alone (qkv::attention, qkv-attention.pc) it must fail to link, not to run.
#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

#include <qkv/nn/functional.h>
#include <qkv/version.h>

int main() {
  std::printf("qkv %s (%d.%d.%d)\n", qkv::kVersion, qkv::kVersionMajor, qkv::kVersionMinor,
              qkv::kVersionPatch);
  // x (2, 3) · Wᵀ with W (2, 3) + b (2): small integers, exact in f32.
  const std::vector<float> x = {1, 2, 3,  //
                                4, 5, 6};
  const std::vector<float> w = {1, 0, -1,  //
                                2, 1, 0};
  const std::vector<float> b = {10, 20};
  const float expected[2][2] = {{1 - 3 + 10, 2 + 2 + 20}, {4 - 6 + 10, 8 + 5 + 20}};
  try {
    const qkv::Tensor y = qkv::nn::linear(qkv::Tensor::from_vector({2, 3}, x),
                                          qkv::Tensor::from_vector({2, 3}, w),
                                          qkv::Tensor::from_vector({2}, b));  // (2, 2)
    for (int i = 0; i < 2; ++i) {
      for (int o = 0; o < 2; ++o) {
        if (!(y.get({i, o}) == expected[i][o])) {  // integers below 2^24: exact
          std::printf("FAIL: y[%d, %d] = %g, expected %g\n", i, o, y.get({i, o}), expected[i][o]);
          return 1;
        }
      }
    }
    std::printf("ok: nn::linear matches x·Wᵀ + b by hand\n");
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
  return 0;
}
