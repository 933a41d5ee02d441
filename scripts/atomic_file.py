"""Writing a file whole or not at all, as the library's AtomicFile does (SQLite's
discipline): a uniquely named file created exclusively beside the target, written, fsynced,
renamed over the target; a failure leaves the target as it was. Every generated file the
scripts write goes through here: docs/cli.md (cli_reference.py), the benchmark records
(bench/record.py), BENCHMARKS.md, README's benchmark table and the plots
(benchmarks_md.py).

Scripts in scripts/ import it as `atomic_file` (Python puts a script's own directory
first on sys.path; the bench package lives beside it).
"""
import os
import tempfile


def write(path, data, mode=0o644):
    """Writes data (str: UTF-8, or bytes) to path atomically. The directory must exist.
    mode: the file's permissions (mkstemp's 0600 would hide a page from other users)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    # The rename is durable once the directory is synced too.
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
