// Deterministic random numbers, identical on every platform and thread count.
//
// `Rng` is a small sequential generator (splitmix64) for initialising weights and
// examples. `counter_uniform` is stateless: the value for (seed, counter) does not
// depend on what was drawn before, so parallel loops (dropout) give the same result
// whichever thread handles which element.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace qkv {

// splitmix64's finaliser: a bijective 64-bit mix (Steele, Lea, Flood 2014).
constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

namespace detail {
// counter_uniform in two steps, for the library's loops over many counters of one seed
// (the dropout kernels hash vectors of counters): the seed's key once, then 53 bits per
// counter. Here only because counter_uniform is inline.
constexpr std::uint64_t counter_key(std::uint64_t seed) { return mix64(seed + 0x9e3779b97f4a7c15ull); }
constexpr std::uint64_t counter_bits(std::uint64_t key, std::uint64_t counter) { return mix64(key ^ counter) >> 11; }
}  // namespace detail

// Uniform in [0, 1) with 53 random bits, a pure function of (seed, counter).
inline double counter_uniform(std::uint64_t seed, std::uint64_t counter) {
  return static_cast<double>(detail::counter_bits(detail::counter_key(seed), counter)) * 0x1.0p-53;
}

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next_u64() {
    state_ += 0x9e3779b97f4a7c15ull;
    return mix64(state_);
  }
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }  // [0, 1)
  // An integer in [0, n), n >= 1: floor(uniform() · n), the top 53 bits (bias below
  // n · 2^-53), clamped to n − 1 against rounding up for large n.
  std::int64_t uniform_int(std::int64_t n) {
    const auto i = static_cast<std::int64_t>(uniform() * static_cast<double>(n));
    return i < n - 1 ? i : n - 1;
  }
  double normal();  // standard normal (Box–Muller), platform independent

 private:
  std::uint64_t state_;
};

// Fisher–Yates over the whole vector, from the back: every order equally likely.
template <class T>
void shuffle(std::vector<T>& v, Rng& rng) {
  for (std::size_t i = v.size(); i > 1; --i)
    std::swap(v[i - 1], v[static_cast<std::size_t>(rng.uniform_int(static_cast<std::int64_t>(i)))]);
}

}  // namespace qkv
