// The umbrella header: everything public in qkv.
#pragma once

#include "qkv/attention.h"
#include "qkv/bert.h"
#include "qkv/cpu.h"
#include "qkv/dtype.h"
#include "qkv/error.h"
#include "qkv/gpt2.h"
#include "qkv/nn.h"
#include "qkv/rng.h"
#include "qkv/safetensors.h"
#include "qkv/tensor.h"
#include "qkv/threads.h"
#include "qkv/tokenizer.h"
#include "qkv/version.h"
#include "qkv/viz.h"
