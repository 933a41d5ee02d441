"""The doc-block runner (run_doc_blocks.py) on small pages written here, and on the README
with one of its Python keywords renamed: a block that breaks must fail, named by file and
line with its output."""
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("QKV_BUILD_DIR", os.path.join(ROOT, "build"))
RUNNER = os.path.join(HERE, "run_doc_blocks.py")


def run(tmp_path, text, *extra):
    page = tmp_path / "page.md"
    page.write_text(text)
    done = subprocess.run([sys.executable, RUNNER, "--build", BUILD, *extra, str(page)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
    return done.returncode, done.stdout, str(page)


def test_blocks_run_in_order_in_one_directory(tmp_path):
    status, out, _ = run(tmp_path, "# t\n\n```sh\necho 41 > n.txt\n```\n\n"
                                   "```text file=sub/conf.txt\nhello\n```\n\n"
                                   "```python\nimport qkv\nprint(int(open('n.txt').read()) + 1, open('sub/conf.txt').read())\n```\n\n"
                                   "```sh\nqkv version >/dev/null && test -d models/dates\n```\n")
    assert status == 0, out
    assert out.count(": ok (") == 3, out


def test_a_failing_block_names_file_line_and_output(tmp_path):
    status, out, page = run(tmp_path, "# t\n\n```sh\ntrue\n```\n\n```python\nimport qkv\n"
                                      "print('before the error')\nqkv.no_such_function()\n```\n")
    assert status == 1
    assert f"{page}:7: FAIL (python block: exit status 1, expected 0" in out
    assert "before the error" in out and "no_such_function" in out


def test_norun_and_shown_blocks_do_not_run(tmp_path):
    status, out, _ = run(tmp_path, "```sh norun\nexit 3\n```\n\n```text\nexit 3\n```\n\n```json\n{}\n```\n")
    assert status == 0 and "no block to run" in out, out


def test_expected_exit_status(tmp_path):
    good = "```sh exit=2\nqkv train lm --no-such-option\n```\n"
    assert run(tmp_path, good)[0] == 0
    status, out, page = run(tmp_path, "```sh exit=2\ntrue\n```\n")
    assert status == 1 and f"{page}:1: FAIL (sh block: exit status 0, expected 2" in out


def test_cpp_is_compiled_against_the_installed_package(tmp_path):
    status, out, _ = run(tmp_path, "```cpp\n#include <cstdio>\n#include <qkv/version.h>\n"
                                   "int main() { std::printf(\"qkv %s\\n\", qkv::kVersion); }\n```\n")
    assert status == 0, out
    status, out, _ = run(tmp_path, "```cpp\n#include <qkv/attention.h>\nint main() { return qkv::nope(); }\n```\n")
    assert status == 1 and "nope" in out


@pytest.mark.parametrize("text, message", [
    ("```\nls\n```\n", "page.md:1: a fenced block without a language"),
    ("```sh\nls\n", "page.md:1: the block opened here is never closed"),
    ("```sh nrun\nls\n```\n", "page.md:1: unknown word 'nrun'"),
    ("```sh needs=bert\nls\n```\n", "page.md:1: unknown fixture bert"),
    ("```rust\nfn main() {}\n```\n", "page.md:1: unknown language 'rust'"),
])
def test_pages_it_cannot_read(tmp_path, text, message):
    status, out, _ = run(tmp_path, text)
    assert status == 2 and message in out, out


def test_a_hung_block_is_stopped(tmp_path):
    status, out, _ = run(tmp_path, "```sh timeout=2\nsleep 30\n```\n")
    assert status == 1 and "still running after 2 s" in out


def test_fixtures_are_hugging_face_directories(tmp_path):
    status, out, _ = run(tmp_path, "```python needs=bert-dir,gpt2-dir\nimport qkv\n"
                                   "print(type(qkv.load_model('bert-dir')).__name__, type(qkv.load_model('gpt2-dir')).__name__)\n```\n")
    assert status == 0, out


def test_renaming_a_keyword_of_a_readme_block_fails_it(tmp_path):
    """The README's runnable Python blocks pass; with the first keyword argument they pass
    to qkv renamed, the runner fails on that block and shows Python's error naming it (a
    page whose blocks cannot fail tests nothing)."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    fence = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)
    call = re.compile(r"qkv\.[\w.]+\((?:[^()]*?,\s*)?([a-z_]+)=")
    keyword = next((m for b in fence.finditer(readme) for m in [call.search(b.group(1))] if m), None)
    assert keyword, "README.md has no Python block passing a keyword argument to qkv"

    def python_blocks(text):  # only the Python blocks, in order, keep the run short
        return "\n".join(f"```python\n{b.group(1)}```\n" for b in fence.finditer(text))

    status, out, _ = run(tmp_path, python_blocks(readme))
    assert status == 0, out
    start = readme.index(keyword.string) + keyword.start(1)
    renamed = keyword.group(1) + "_renamed"
    status, out, _ = run(tmp_path, python_blocks(readme[:start] + renamed + readme[keyword.end(1) + readme.index(keyword.string):]))
    assert status == 1, out
    assert renamed in out.split("---- output ----", 1)[1], out
