"""Hostile cases of issue 48: atomic writes, model directories that change as a whole, resume.
Read by cases.py (see its docstring for what a Case checks)."""

from cases import Case, qkv, py, PY_ENV  # noqa: F401


def cases():
    return []
