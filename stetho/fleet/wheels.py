"""The wheelhouse the sweep copies to nodes: stetho as the controller runs it, and what
`stetho check` needs on a node, so nodes install offline (they often reach no package index).

stetho itself is built from the source tree when the controller runs from one (an editable
install), else repacked from its installed files; its node-side dependencies are repacked from
the controller's own installed distributions, so nodes run exactly the versions the controller
tested with. The node needs the controller's Python minor version (PyYAML ships a compiled
module). The result is cached by content: the version id (`0.1.0-1a2b3c4d`) names the node's
venv, so an unchanged stetho is never installed twice.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

from stetho import __version__
from stetho.errors import StethoError


def node_requires() -> tuple[str, ...]:
    """What a node installs: stetho's own runtime dependencies (pyproject.toml's
    `dependencies`, as the installed metadata has them), without any extra. One list: what
    the controller tested with is what the node gets, and the controller extra (Ansible, the
    wheel build) stays off the nodes."""
    env: dict[str, str] = dict(default_environment())  # type: ignore[arg-type]
    out = []
    for text in metadata.requires("stetho") or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({**env, "extra": ""}):
            out.append(req.name)
    return tuple(out)

_SOURCE_DIRS = ("stetho", "checks", "baselines", "gates", "templates", "playbooks",
                "fixtures/real")


@dataclass(frozen=True)
class Wheelhouse:
    """`wheels` are what gets installed; `pip` is pip's own wheel, which a node runs directly
    (`python pip.whl/pip install ...`) into a venv made --without-pip: no ensurepip, no
    network, and the node needs no pip of its own."""

    version_id: str
    tarball: Path
    wheels: tuple[str, ...]
    pip: str


def cache_root() -> Path:
    """The configured cache folder (STETHO_CACHE), where the wheelhouse is built."""
    from stetho import config

    return config.active().cache


def build(cache: Path | None = None, progress: Callable[[str], None] | None = None
          ) -> Wheelhouse:
    """The wheelhouse for this stetho, from the cache or built now (a first build takes a
    minute or two). `progress` hears each step ("building stetho 0.1.0 wheel", "3/30
    dependency wheels", "ready (cached)"): the library never prints, the CLI shows them."""
    say = progress or (lambda _text: None)
    cache = cache or cache_root() / "wheelhouse"
    src = _source_root()
    key = hashlib.sha256()
    key.update(__version__.encode())
    key.update(metadata.version("pip").encode())
    key.update(_tree_hash(src, cache / ".memo").encode() if src
               else _dist_hash("stetho").encode())
    for pin in _closure_pins(cache / ".memo"):
        key.update(pin.encode())
    version_id = f"{__version__}-{key.hexdigest()[:8]}"
    folder = cache / version_id
    tarball = folder / "wheels.tgz"
    if tarball.is_file():
        say(f"ready (cached, {version_id})")
        return _house(version_id, tarball, sorted(p.name for p in folder.glob("*.whl")))
    deps = _closure(node_requires())
    tmp = Path(tempfile.mkdtemp(prefix="wheelhouse-", dir=_mkdir(cache)))
    try:
        say(f"building stetho {__version__} wheel"
            + (f" from {src}" if src is not None else " from its installed files"))
        if src is not None:
            _build_source(src, tmp)
        else:
            repack(metadata.distribution("stetho"), tmp)
        others = [*deps, *([] if any(_norm(d.metadata["Name"]) == "pip" for d in deps)
                           else [metadata.distribution("pip")])]
        for i, d in enumerate(others, 1):
            say(f"{i}/{len(others)} dependency wheels ({d.metadata['Name']} {d.version})")
            repack(d, tmp)
        names = sorted(p.name for p in tmp.glob("*.whl"))
        say(f"packing {len(names)} wheels")
        with tarfile.open(tmp / "wheels.tgz", "w:gz") as tar:
            for n in names:
                tar.add(tmp / n, arcname=n)
        if folder.exists():
            shutil.rmtree(folder)
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"ready ({version_id})")
    return _house(version_id, tarball, names)


def _house(version_id: str, tarball: Path, names: list[str]) -> Wheelhouse:
    pip = next(n for n in names if n.startswith("pip-"))
    return Wheelhouse(version_id, tarball, tuple(n for n in names if n != pip), pip)


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


def _source_root() -> Path | None:
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "stetho").is_dir() else None


def _source_files(root: Path) -> list[Path]:
    """The files the wheel is built from, relative to root. In a git checkout only tracked
    files (as they are in the working tree): a run folder or `fetched/` left in the tree must
    neither change the version (reinstalling every node) nor travel to the nodes."""
    wanted = ("pyproject.toml", "README.md", *_SOURCE_DIRS, "fixtures/recorded", "benchmarks",
              "rules")
    try:
        proc = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--", *wanted],
                              capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        proc = None
    if proc is not None and proc.returncode == 0 and proc.stdout:
        names = [n for n in proc.stdout.decode().split("\0") if n]
        return sorted(Path(n) for n in names if (root / n).is_file())
    out: list[Path] = []
    for d in wanted:
        p = root / d
        found = [p] if p.is_file() else [x for x in p.rglob("*") if x.is_file()
                                         and "__pycache__" not in x.parts]
        out += [f.relative_to(root) for f in found]
    return sorted(out)


def _tree_hash(root: Path, memo: Path | None = None) -> str:
    """sha256 over the source files' names and contents. With `memo`, the contents are read
    again only when a file's size, mtime or ctime changed (git's index trusts the same): every
    sweep asks, and reading and hashing ~1,200 files each time cost a second of CPU."""
    files = _source_files(root)
    stamp = hashlib.sha256()
    for rel in files:
        st = (root / rel).stat()
        stamp.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n".encode())
    return _memo(memo, "tree-" + stamp.hexdigest(), lambda: _content_hash(root, files))


def _content_hash(root: Path, files: list[Path]) -> str:
    h = hashlib.sha256()
    for rel in files:
        h.update(str(rel).encode())
        h.update((root / rel).read_bytes())
    return h.hexdigest()


def _closure_pins(memo: Path | None = None) -> list[str]:
    """`Name==version` of every distribution a node installs. With `memo`, read the metadata
    again only when an installed distribution on sys.path changed (its METADATA's stamp):
    parsing a hundred METADATA files cost every sweep most of a second."""
    stamp = hashlib.sha256(sys.version.encode())
    for entry in sys.path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for name in names:
            if name.endswith((".dist-info", ".egg-info")):
                for meta in ("METADATA", "PKG-INFO"):
                    try:
                        st = os.stat(os.path.join(entry or ".", name, meta))
                    except OSError:
                        continue
                    stamp.update(f"{entry}/{name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    text = _memo(memo, "deps-" + stamp.hexdigest(), lambda: "\n".join(
        f"{d.metadata['Name']}=={d.version}" for d in _closure(node_requires())))
    return text.split("\n")


def _memo(folder: Path | None, name: str, compute: Callable[[], str]) -> str:
    """compute(), kept in folder/name for the next call with the same stamp."""
    path = folder / name if folder is not None else None
    if path is not None:
        try:
            return path.read_text(encoding="utf-8")
        except OSError:
            pass
    value = compute()
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{name}.{os.getpid()}")
            tmp.write_text(value, encoding="utf-8")
            tmp.replace(path)  # atomic: a sweep beside this one reads all or nothing
        except OSError:
            pass  # no memo: the next sweep computes it again
    return value


def _dist_hash(name: str) -> str:
    dist = metadata.distribution(name)
    return hashlib.sha256((dist.read_text("RECORD") or "").encode()).hexdigest()


def _build_source(src: Path, out: Path) -> None:
    """Build from a copy holding only the source files: never from the tree itself, whose
    untracked files the build would pick up."""
    clean = out / "src"
    for rel in _source_files(src):
        (clean / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, clean / rel)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "-q", "-w", str(out), str(clean)],
                          capture_output=True, text=True, timeout=600)
    shutil.rmtree(clean, ignore_errors=True)
    if proc.returncode != 0:
        raise StethoError(f"building the stetho wheel from {src} failed: "
                          f"{proc.stderr.strip()[-800:]}")


def _closure(roots: tuple[str, ...]) -> list[metadata.Distribution]:
    env: dict[str, str] = dict(default_environment())  # type: ignore[arg-type]
    seen: dict[str, metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        name = _norm(todo.pop())
        if name in seen:
            continue
        dist = metadata.distribution(name)
        seen[name] = dist
        for req_text in dist.requires or []:
            req = Requirement(req_text)
            if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
                continue
            todo.append(req.name)
    return sorted(seen.values(), key=lambda d: _norm(d.metadata["Name"]))


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _compress_tags(tags: list[str]) -> str:
    """['py2-none-any', 'py3-none-any'] -> 'py2.py3-none-any' (a wheel's compressed tag set)."""
    parts = [t.split("-") for t in tags if t.count("-") == 2]
    if not parts:
        return "py3-none-any"
    return "-".join(".".join(dict.fromkeys(p[i] for p in parts)) for i in range(3))


def repack(dist: metadata.Distribution, out: Path) -> Path:
    """Zip an installed distribution's files back into a wheel, with a fresh RECORD."""
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    info = f"{name}-{dist.version}.dist-info"
    wheel_meta = dist.read_text("WHEEL") or ""
    tags = [ln.split(":", 1)[1].strip() for ln in wheel_meta.splitlines()
            if ln.startswith("Tag:")]
    tag = _compress_tags(tags) if tags else "py3-none-any"
    base = Path(str(dist.locate_file("")))
    path = out / f"{name}-{dist.version}-{tag}.whl"
    records: list[tuple[str, str, str]] = []
    dist_info_dir = None
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for rel in dist.files or []:
            rel_s = str(rel)
            if rel_s.startswith("..") or "__pycache__" in rel_s or rel_s.endswith(".pyc"):
                continue
            if rel_s.endswith(".dist-info/RECORD"):
                dist_info_dir = rel_s.rsplit("/", 1)[0]
                continue
            if rel_s.endswith((".dist-info/INSTALLER", ".dist-info/direct_url.json",
                               ".dist-info/REQUESTED")):
                continue
            src = base / rel_s
            if not src.is_file():
                continue
            data = src.read_bytes()
            zf.writestr(rel_s, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            records.append((rel_s, f"sha256={digest.decode()}", str(len(data))))
        if not wheel_meta:
            wheel_meta = ("Wheel-Version: 1.0\nGenerator: stetho\nRoot-Is-Purelib: true\n"
                          f"Tag: {tag}\n")
            zf.writestr(f"{dist_info_dir or info}/WHEEL", wheel_meta)
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerows(records)
        writer.writerow([f"{dist_info_dir or info}/RECORD", "", ""])
        zf.writestr(f"{dist_info_dir or info}/RECORD", buf.getvalue())
    return path


def extra_vars(house: Wheelhouse) -> dict[str, object]:
    """The extra vars playbooks/stetho-check.yml needs to install this wheelhouse: one
    archive, the only transfer a node gets (the gate policies travel in the stetho wheel,
    `stetho/_bundled/gates`, and the playbook puts them in place from the installed venv)."""
    return {"stetho_version_id": house.version_id, "stetho_wheels": str(house.tarball),
            "stetho_wheel_files": list(house.wheels), "stetho_pip_wheel": house.pip}


if __name__ == "__main__":  # python -m stetho.fleet.wheels: extra vars for ansible-playbook
    import json as _json

    print(_json.dumps(extra_vars(build())))
