"""qkv.cuda on a machine without a GPU: it loads, says why it cannot run, and refuses what is
not a CUDA tensor by name. (On a GPU, scripts/cuda/check_torch.py and check_torch_backward.py
check the results against float64 PyTorch; tests/cuda the C++ side.)"""

import os

import pytest
import torch

import qkv
import qkv.cuda


def test_library_is_in_the_package_when_built_with_cuda():
    path = qkv.cuda.library_path()
    if not os.path.exists(path):
        pytest.skip(f"qkv built without CUDA (no {path})")
    assert os.path.dirname(path) == os.path.dirname(os.path.abspath(qkv.cuda.__file__))


def test_available_says_why_not():
    ok, reason = qkv.cuda.available()
    if ok:
        pytest.skip("a CUDA device is present: scripts/cuda/ checks it")
    assert reason, "unavailable without a reason"


def test_cpu_tensors_are_refused_by_name():
    q = torch.ones(1, 1, 4, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="query must be a CUDA torch.Tensor"):
        qkv.cuda.attention(q, q, q)
    with pytest.raises(ValueError, match="query must be a CUDA torch.Tensor"):
        qkv.cuda.attention_backward(q, q, q, q, q, torch.zeros(1, 1, 4))


def test_cpu_tensors_still_take_the_cpu_path():
    q = torch.randn(1, 2, 4, 64)
    out = qkv.scaled_dot_product_attention(q, q, q)
    want = torch.softmax(q @ q.transpose(-1, -2) / 8.0, -1) @ q
    assert torch.allclose(torch.as_tensor(out), want, atol=1e-5)
