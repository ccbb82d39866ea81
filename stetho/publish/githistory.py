"""Reading a git store's whole history: every version of every file any commit on the
branch held, however it got there, so a record deleted, edited, reverted, renamed or
brought in by a merge is still seen."""

from __future__ import annotations

import contextlib
import subprocess
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from stetho.publish.gitstore import GIT_TIMEOUT_S, _command

if TYPE_CHECKING:
    from stetho.publish.gitstore import Clone


def every_version(clone: Clone, folder: str | None = None, max_bytes: int | None = None
                  ) -> Iterator[tuple[str, str, bytes | None]]:
    """(commit, path, content) for every version of every file under `folder` (None:
    anywhere) that any commit reachable from HEAD or the remote branch ever held, oldest
    first: whatever way it arrived (added, edited, renamed or copied, or only in a merge
    commit's result). Content over `max_bytes` is None (not read)."""
    refs = [r for r in ("HEAD", clone.upstream if clone.remote else "") if r and clone.rev(r)]
    if not refs:
        return
    # --no-renames: a rename is a deletion and an addition, so the new path is seen;
    # -m: a merge is compared with each parent, so what only the merge brings is seen.
    log = clone.out("log", "--reverse", "--format=%x00%H", "--raw", "--no-abbrev",
                   "--no-renames", "-m", "--diff-filter=AMT", "-z", *refs,
                   *(("--", folder) if folder else ()))
    wanted: dict[tuple[str, str], str] = {}
    commit = ""
    fields = log.split("\x00")
    i = 0
    while i < len(fields):
        item = fields[i].strip("\n")
        if item.startswith(":"):  # ":old-mode new-mode old-sha new-sha status", then path
            meta = item[1:].split()
            path = fields[i + 1] if i + 1 < len(fields) else ""
            i += 2
            if len(meta) >= 5 and commit and meta[1].startswith("100"):
                wanted.setdefault((commit, path), meta[3])
            continue
        if item:
            commit = item.split()[0]
        i += 1
    if not wanted:
        return
    contents = _blobs(clone, sorted(set(wanted.values())), max_bytes)
    for (commit, path), sha in wanted.items():
        yield commit, path, contents.get(sha)


def _blobs(clone: Clone, shas: list[str], max_bytes: int | None) -> dict[str, bytes]:
    """The contents of these blobs through one `git cat-file --batch`, streamed: a blob over
    `max_bytes` is read past in chunks, never held (a huge file pushed to the repository costs
    time, not memory)."""
    if not shas:
        return {}
    argv, child = _command([*clone.ident, "cat-file", "--batch"], clone.env)
    proc = subprocess.Popen(argv, cwd=clone.path, env=child, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    def feed() -> None:
        with contextlib.suppress(OSError):
            stdin.write("".join(f"{s}\n" for s in shas).encode())
        with contextlib.suppress(OSError):
            stdin.close()

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    watchdog = threading.Timer(GIT_TIMEOUT_S, proc.kill)
    watchdog.start()
    out: dict[str, bytes] = {}
    try:
        for sha in shas:
            header = stdout.readline().split()
            if not header:
                break
            if len(header) < 3 or header[1] != b"blob":
                continue
            size = int(header[2])
            if max_bytes is None or size <= max_bytes:
                out[sha] = stdout.read(size)
            else:
                while size > 0:
                    chunk = stdout.read(min(size, 1 << 20))
                    if not chunk:
                        break
                    size -= len(chunk)
            stdout.read(1)  # the newline after each object
    finally:
        watchdog.cancel()
        stdout.close()
        proc.kill()
        proc.wait()
        writer.join(timeout=5)
    return out
