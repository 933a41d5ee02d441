"""Hostile cases of issue 48: outputs that are inputs, and --index files that are not qkv indexes.
Read by cases.py (see its docstring for what a Case checks)."""

from cases import Case, qkv, py, PY_ENV  # noqa: F401


def cases():
    return []
