// The amx variant with its tile instructions modeled in plain C++ (amx_tiles.inc): the
// same tile code, run and tested against the reference on CPUs without AMX
// (QKV_ISA=amx_emulated, and the tests' list of variants). Slow; never chosen by itself.
#define QKV_AMX_TILES 1
#define QKV_AMX_EMULATED 1
#include "attention/kernels/flash_avx512_bf16.cpp"  // NOLINT(bugprone-suspicious-include): one source, three builds
