"""Edit a copy of a real `nvidia-smi -q` text output, field by field, per GPU.

Faults are injected into copies of real recorded outputs; this finds a field by its section path
inside one GPU's section (e.g. ("Applications Clocks", "Graphics")) and replaces its value,
keeping nvidia-smi's column alignment. Everything else stays byte for byte as recorded.
"""

from __future__ import annotations

import re

_GPU = re.compile(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\s*$")
_FIELD = re.compile(r"^(?P<indent>\s*)(?P<key>\S.*?)\s*:\s?(?P<value>.*)$")


class SmiText:
    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")

    def __str__(self) -> str:
        return "\n".join(self.lines)

    def gpu_spans(self) -> list[tuple[int, int]]:
        """(start, end) line ranges of each GPU section, in output order."""
        starts = [i for i, line in enumerate(self.lines) if _GPU.match(line)]
        ends = starts[1:] + [len(self.lines)]
        return list(zip(starts, ends, strict=True))

    def bus_ids(self) -> list[str]:
        return [self.lines[s].split()[1] for s, _ in self.gpu_spans()]

    def _find(self, gpu: int, path: tuple[str, ...]) -> tuple[int, re.Match[str]]:
        start, end = self.gpu_spans()[gpu]
        stack: list[tuple[int, str]] = []
        for i in range(start + 1, end):
            line = self.lines[i]
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip())
            while stack and stack[-1][0] >= indent:
                stack.pop()
            m = _FIELD.match(line)
            has_value = bool(m and m.group("value").strip())
            key = m.group("key") if m else line.strip()
            if m and has_value and tuple(k for _, k in stack) + (key,) == path:
                return i, m
            stack.append((indent, key))  # any line can parent deeper ones (HW Slowdown)
        raise KeyError(f"GPU {gpu}: no field {' / '.join(path)}")

    def set(self, gpu: int, path: tuple[str, ...], value: str) -> None:
        """Set the field at `path` in GPU number `gpu` (0-based, output order)."""
        i, m = self._find(gpu, path)
        line = self.lines[i]
        colon = line.index(":", len(m.group("indent")) + len(m.group("key")))
        self.lines[i] = line[: colon + 1] + " " + value

    def get(self, gpu: int, path: tuple[str, ...]) -> str:
        return self._find(gpu, path)[1].group("value").strip()

    def drop_gpu(self, gpu: int) -> str:
        """Remove a GPU's section (a GPU that fell off the bus vanishes); returns its bus id."""
        start, end = self.gpu_spans()[gpu]
        bus = self.lines[start].split()[1]
        del self.lines[start:end]
        return bus

    def replace_all(self, old: str, new: str) -> None:
        self.lines = [line.replace(old, new) for line in self.lines]
