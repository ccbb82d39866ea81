"""Reading a git store's whole history: every version of every file any commit on the
branch held, however it got there, so a record deleted, edited, reverted, renamed or
brought in by a merge is still seen."""

from __future__ import annotations

import subprocess
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
    sizes = _sizes(clone, set(wanted.values()))
    small = sorted({s for s in wanted.values()
                    if max_bytes is None or sizes.get(s, 0) <= max_bytes})
    contents = _blobs(clone, small)
    for (commit, path), sha in wanted.items():
        yield commit, path, contents.get(sha)

def _sizes(clone: Clone, shas: set[str]) -> dict[str, int]:
    argv, child = _command([*clone.ident, "cat-file", "--batch-check"], clone.env)
    proc = subprocess.run(argv, cwd=clone.path, env=child,
                          input="".join(f"{s}\n" for s in sorted(shas)).encode(),
                          capture_output=True, timeout=GIT_TIMEOUT_S, check=False)
    out: dict[str, int] = {}
    for line in proc.stdout.decode("ascii", "replace").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "blob":
            out[parts[0]] = int(parts[2])
    return out

def _blobs(clone: Clone, shas: list[str]) -> dict[str, bytes]:
    if not shas:
        return {}
    argv, child = _command([*clone.ident, "cat-file", "--batch"], clone.env)
    batch = subprocess.run(argv, cwd=clone.path, env=child,
                           input="".join(f"{s}\n" for s in shas).encode(),
                           capture_output=True, timeout=GIT_TIMEOUT_S, check=False)
    data, pos, out = batch.stdout, 0, {}
    for sha in shas:
        end = data.find(b"\n", pos)
        if end < 0:
            break
        header = data[pos:end].split()
        pos = end + 1
        if len(header) < 3 or header[1] != b"blob":
            continue
        size = int(header[2])
        out[sha] = data[pos:pos + size]
        pos += size + 1
    return out
