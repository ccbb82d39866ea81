"""A check run's own pytest temporary directory, so its exit waits on nothing of the user's.

xdist's controller always asks pytest for a base temporary directory (for its workers'
`--basetemp`), as does any check using `tmp_path`. Without `--basetemp`, pytest makes a
numbered directory under $TMPDIR/pytest-of-USER and registers an atexit hook that deletes the
older numbered and `garbage-*` directories there: every other pytest run's leftovers,
gigabytes on a CI or dev machine. That hook ran after the verdict was printed, for minutes
under load: a `stetho check -n 2` was seen in shutil.rmtree at exit past 300 s (a Slurm
prolog or CI gate that does not return), deleting other runs' files as it went.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def private_basetemp() -> Iterator[list[str]]:
    """pytest's `--basetemp` arguments for one run: a fresh directory of its own, removed
    afterwards, so pytest neither makes nor cleans up anything in the user's temporary
    directories."""
    own = Path(tempfile.mkdtemp(prefix="stetho-check-"))
    try:
        yield ["--basetemp", str(own / "pytest")]
    finally:
        shutil.rmtree(own, ignore_errors=True)
