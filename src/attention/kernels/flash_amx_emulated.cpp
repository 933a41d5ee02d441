// The amx kernel variant with its tile instructions modeled in plain C++ (amx_tiles.inc):
// the same tile code as flash_amx.cpp, run and tested against the reference on CPUs
// without AMX (QKV_ISA=amx_emulated, and the tests' list of variants). Slow; never chosen
// by itself.
#define QKV_AMX_EMULATED 1
#include "attention/kernels/flash_amx.cpp"  // NOLINT(bugprone-suspicious-include): one source, two builds
