"""Hostile cases of issue 48: bounded parsers: JSON nesting and size, PNG chunk lengths and palettes, runs of combining marks.
Read by cases.py (see its docstring for what a Case checks)."""

from cases import Case, qkv, py, PY_ENV  # noqa: F401


def cases():
    return []
