"""pytest configuration for the qkv Python suite.

ctest runs this with PYTHONPATH=<build>/python. Run by hand, the suite also finds a
build in <repo>/build/python:

    /usr/bin/python3 -m pytest -q tests/python
"""

import os
import sys

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)  # oracle.py

try:
    import qkv  # noqa: F401
except ImportError:
    _BUILD = os.path.join(_HERE, "..", "..", "build", "python")
    if os.path.isdir(os.path.join(_BUILD, "qkv")):
        sys.path.insert(0, os.path.abspath(_BUILD))
    import qkv  # noqa: F401,E402


@pytest.fixture
def threads():
    """Lets a test change qkv's thread count and restores it afterwards."""
    import qkv as module

    before = module.get_num_threads()
    yield module
    module.set_num_threads(before)
