#include "qkv/rng.h"

#include <cmath>
#include <numbers>

namespace qkv {

double Rng::normal() {
  // Box–Muller with our own uniforms, so the sequence is the same on every standard
  // library (std::normal_distribution's algorithm is implementation-defined).
  const double u1 = 1.0 - uniform();  // (0, 1]: log stays finite
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace qkv
