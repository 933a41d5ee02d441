// The AMX variant of the fused kernel: flash_avx512_bf16.cpp built with bf16 inputs'
// products on AMX tiles (namespace amx). The comment there says how the builds differ.
#define QKV_AMX_TILES 1
#include "attention/kernels/flash_avx512_bf16.cpp"  // NOLINT(bugprone-suspicious-include): one source, three builds
