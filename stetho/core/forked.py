"""What a forked pool worker does first: it ends when its pool terminates it, and leaves Ctrl-C
to the parent. A worker inherits its parent's handlers (a CLI's "finish the batch first", a
caller's own); one that ran a SIGTERM handler instead of ending went on waiting on the pool's
task queue, and the pool's exit joined it forever."""

from __future__ import annotations

import signal


def worker_signals() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
