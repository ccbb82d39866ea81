"""SSH signatures for overrides, through OpenSSH's own `ssh-keygen -Y` (the scheme git uses for
signed commits): people sign with their own keys, verifiers hold only public keys.

`sign` runs `ssh-keygen -Y sign` with a private key, or with a public key whose private half is
in ssh-agent. `Verifier` answers "which principals of this allowed signers file made this
signature over these bytes?" with `ssh-keygen -Y find-principals` (the first line listing the
key) and `ssh-keygen -Y verify -I <principal>` (the signature, the namespace, the line's
options); whether one key is also listed under another principal is again `verify -I`'s
answer (`signed_as`). Nothing here decides identity on its own: what OpenSSH accepts is it.

Verifying is a process per question, so answers are cached by the content hash of everything
ssh-keygen reads (the signers file's bytes, the signature, the message, the principal): a hit
can only say "this exact signature over this exact content verified against this exact
signers file". They are kept in memory, and on disk under an HMAC only this user can make
(stetho.gate.signature_cache). A signers file with time-bound lines (`valid-after`,
`valid-before`, `cert-authority`) is only cached in memory: its answers change with the clock.

The allowed signers file is checked line by line when it is loaded: principals that are
patterns (`*@corp`, `!x`), quoted principals and options stetho does not know are a
ConfigError naming file:line, never a crash later in verification.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from stetho.errors import ConfigError, StethoError
from stetho.gate import signature_cache
from stetho.gate.override_policy import PRINCIPAL_RE

NAMESPACE = "stetho-override"
SIGN_TIMEOUT_S = 300.0  # a passphrase typed at the terminal
VERIFY_TIMEOUT_S = 60.0
MAX_SIGNATURE_CHARS = 8192
#: Cached answers kept on disk; the oldest go first.
MAX_CACHED = 20_000
SIGNATURE_RE = re.compile(r"^-----BEGIN SSH SIGNATURE-----\n[A-Za-z0-9+/=\n]{1,8000}\n"
                          r"-----END SSH SIGNATURE-----\n?$")
_FINGERPRINT_RE = re.compile(r" key (SHA256:[A-Za-z0-9+/=]+)")
_TIME_BOUND = re.compile(rb"valid-after|valid-before|cert-authority", re.I)
#: ssh-keygen failing for this machine's reasons, not giving a verdict on the signature.
_FAULT = re.compile(rb"Couldn't read|Unable to open|No such file|Permission denied|"
                    rb"Cannot allocate|[Oo]ut of memory|Resource temporarily")


class SignatureError(StethoError):
    """ssh-keygen is missing or did not answer: nothing could be signed (exit 3); when
    verifying, nothing verifies."""


@dataclass(frozen=True)
class Signer:
    """Who made a signature that verified: the principals of the first line listing the key,
    the principal it verified as, and the key's fingerprint. (Whether the key is listed under
    yet another principal is `Verifier.signed_as`'s question.)"""

    principals: tuple[str, ...]
    verified_as: str
    fingerprint: str

    def shares_principal(self, other: Signer) -> bool:
        mine = {p.casefold() for p in self.principals}
        return any(p.casefold() in mine for p in other.principals)


def valid_signature_text(text: object) -> bool:
    return (isinstance(text, str) and len(text) <= MAX_SIGNATURE_CHARS
            and bool(SIGNATURE_RE.match(text)))


def _keygen(args: list[str], *, stdin: bytes | None = None, timeout: float,
            interactive: bool = False) -> subprocess.CompletedProcess[bytes]:
    from stetho import config

    argv = ["ssh-keygen", *args]
    try:
        return subprocess.run(
            argv, input=stdin, capture_output=True, timeout=timeout, check=False,
            env=config.child_environment({"LC_ALL": "C"}),
            stdin=None if stdin is not None else (
                None if interactive and sys.stdin is not None and sys.stdin.isatty()
                else subprocess.DEVNULL))
    except FileNotFoundError:
        raise SignatureError("ssh-keygen (OpenSSH) is not installed: overrides are signed and "
                             "verified with it (Debian: apt-get install openssh-client)") from None
    except subprocess.TimeoutExpired:
        raise SignatureError(f"`ssh-keygen {' '.join(args[:2])}` did not finish in "
                             f"{timeout:.0f}s") from None


def _said(proc: subprocess.CompletedProcess[bytes]) -> str:
    """ssh-keygen's own explanation: its last line of stderr, else of stdout."""
    for stream in (proc.stderr, proc.stdout):
        lines = [x.strip() for x in stream.decode("utf-8", "replace").splitlines() if x.strip()]
        lines = [x for x in lines if not x.startswith(("Signing ", "Write signature"))]
        if lines:
            return lines[-1]
    return f"exit {proc.returncode}"


def sign(message: bytes, key: Path, namespace: str = NAMESPACE) -> str:
    """An armored SSH signature of `message` by `key`: a private key file, or a public key
    (`key.pub`) whose private half ssh-agent holds. A passphrase is asked at the terminal."""
    if not key.exists():
        raise ConfigError(f"no signing key at {key}: pass --key or set STETHO_SIGNING_KEY (make "
                          "one with `ssh-keygen -t ed25519`)")
    with tempfile.TemporaryDirectory(prefix="stetho-sign-") as tmp:
        data = Path(tmp) / "message"
        data.write_bytes(message)
        proc = _keygen(["-Y", "sign", "-q", "-n", namespace, "-f", str(key), str(data)],
                       timeout=SIGN_TIMEOUT_S, interactive=True)
        sig = data.with_name("message.sig")
        if proc.returncode != 0 or not sig.is_file():
            raise ConfigError(f"ssh-keygen could not sign with {key}: {_said(proc)}")
        text = sig.read_text(encoding="ascii")
    if not valid_signature_text(text):
        raise ConfigError(f"ssh-keygen wrote an unexpected signature with {key}")
    return text


class Verifier:
    """Verifies signatures against one allowed signers file, as it is when this is made (its
    bytes are copied, so ssh-keygen reads exactly what the cache key hashed). Use as a
    context manager; `prefetch` answers many questions in parallel, `check` one."""

    def __init__(self, signers: Path, namespace: str = NAMESPACE,
                 cache_file: Path | None = None, refuse_under: tuple[Path, ...] = ()) -> None:
        self.signers = signers
        self.namespace = namespace
        self.content = signers.read_bytes()
        check_signers(self.content, str(signers))
        self._persist = cache_file if not _TIME_BOUND.search(self.content) else None
        #: Why the on-disk cache is not used (None: used, or none was asked for).
        self.cache_problem = signature_cache.problem(self._persist, refuse_under)
        if self.cache_problem:
            self._persist = None
        self._disk = signature_cache.load(self._persist)
        self._tmp = tempfile.TemporaryDirectory(prefix="stetho-verify-")
        self._copy = Path(self._tmp.name) / "allowed_signers"
        self._copy.write_bytes(self.content)
        self._memo: dict[str, list[str]] = {}
        self._dirty = False

    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self._persist is not None and self._dirty:
            signature_cache.save(self._persist, self._disk, MAX_CACHED)
        self._tmp.cleanup()

    def check(self, message: bytes, signature: str,
              wanted: tuple[str, ...] = ()) -> Signer | str:
        """The signer, or why not (in ssh-keygen's words). With `wanted`, the signature is
        verified as the first of those principals the key is listed under, if any."""
        if not valid_signature_text(signature):
            return "not an SSH signature (-----BEGIN SSH SIGNATURE----- ...)"
        found = self._ask("find", signature, b"", "")
        if found[0] != "ok":
            return found[1]
        principals = _plain(found)
        if not principals:
            return (f"the key is listed only under principal patterns ({', '.join(found[1:])}): "
                    "a person's principal must be a plain name")
        done = found
        for who in _candidates(principals, wanted):
            done = self._ask("verify", signature, message, who)
            if done[0] == "ok":
                return Signer(principals, who, done[1])
        return done[1]

    def signed_as(self, message: bytes, signature: str, principal: str) -> bool:
        """Whether the signature verifies as `principal` (the key listed under it too)."""
        return (valid_signature_text(signature)
                and self._ask("verify", signature, message, principal)[0] == "ok")

    def prefetch(self, items: list[tuple[bytes, str, tuple[str, ...]]]) -> None:
        """Answer `check` for all of these at once, ssh-keygen running in parallel: first
        which principals list each key, then each signature as the principals it may use."""
        good = [(m, s, w) for m, s, w in items if valid_signature_text(s)]
        self._parallel([("find", s, b"", "") for _, s, _ in good])
        asks = []
        for m, s, w in good:
            found = self._ask("find", s, b"", "")
            if found[0] == "ok":
                asks += [(m, s, who) for who in _candidates(_plain(found), w)]
        self.prefetch_as(asks)

    def prefetch_as(self, items: list[tuple[bytes, str, str]]) -> None:
        """Answer `signed_as` for all of these at once."""
        self._parallel([("verify", s, m, p) for m, s, p in items if valid_signature_text(s)])

    # -- internals -------------------------------------------------------------------------

    def _key(self, kind: str, signature: str, message: bytes, principal: str) -> str:
        h = hashlib.sha256()
        for part in (b"stetho-ssh-keygen/1", kind.encode(), self.namespace.encode(),
                     self.content, signature.encode(), message, principal.encode()):
            h.update(len(part).to_bytes(8, "big"))
            h.update(part)
        return h.hexdigest()

    def _ask(self, kind: str, signature: str, message: bytes, principal: str) -> list[str]:
        """["ok", answers...], ["no", why] or ["fault", why]: cached, else asked."""
        key = self._key(kind, signature, message, principal)
        got = self._memo.get(key) or self._disk.get(key)
        if got is None:
            got = self._run(kind, signature, message, principal)
            self._remember(key, got)
        return got

    def _remember(self, key: str, got: list[str]) -> None:
        """Every answer in memory; on disk OpenSSH's verdicts, not faults of this machine
        (an unreadable file must not refuse a signature for good)."""
        self._memo[key] = got
        if self._persist is not None and got[0] != "fault":
            self._disk[key] = got
            self._dirty = True

    def _parallel(self, asks: list[tuple[str, str, bytes, str]]) -> None:
        todo: dict[str, tuple[str, str, bytes, str]] = {}
        for a in asks:
            key = self._key(*a)
            if key not in self._memo and key not in self._disk:
                todo[key] = a
        if not todo:
            return
        workers = min(8, os.cpu_count() or 2, len(todo))
        from concurrent.futures import ThreadPoolExecutor  # only with overrides to verify

        with ThreadPoolExecutor(max_workers=workers) as pool:
            answers = list(pool.map(lambda a: self._run(*a), todo.values()))
        for key, got in zip(todo, answers, strict=True):
            self._remember(key, got)

    def _run(self, kind: str, signature: str, message: bytes, principal: str) -> list[str]:
        """One ssh-keygen run's answer. ssh-keygen missing or hung is a fault: nothing
        verifies (every override is then ignored, saying why), and nothing of it is kept."""
        fd, name = tempfile.mkstemp(suffix=".sig", dir=self._tmp.name)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(signature)
        try:
            return self._keygen_answer(kind, name, message, principal)
        except SignatureError as exc:
            return ["fault", str(exc)]
        finally:
            os.unlink(name)

    def _keygen_answer(self, kind: str, name: str, message: bytes,
                       principal: str) -> list[str]:
        if kind == "find":
            proc = _keygen(["-Y", "find-principals", "-f", str(self._copy), "-s", name],
                           timeout=VERIFY_TIMEOUT_S)
            if proc.returncode == 0:
                return ["ok", *proc.stdout.decode("utf-8", "replace").split()]
            why = f"the key is not in the allowed signers file ({_said(proc)})"
        else:
            proc = _keygen(["-Y", "verify", "-f", str(self._copy), "-I", principal, "-n",
                            self.namespace, "-s", name], stdin=message,
                           timeout=VERIFY_TIMEOUT_S)
            if proc.returncode == 0:
                m = _FINGERPRINT_RE.search(proc.stdout.decode("utf-8", "replace"))
                return ["ok", m.group(1) if m else ""]
            why = _said(proc)
        return ["fault" if _FAULT.search(proc.stderr) else "no", why]


def _plain(found: list[str]) -> tuple[str, ...]:
    """The principals find-principals printed that can be a person (no patterns)."""
    return tuple(p for p in found[1:] if PRINCIPAL_RE.match(p))


def _candidates(principals: tuple[str, ...], wanted: tuple[str, ...]) -> list[str]:
    """Which principals to verify a signature as, in order: the wanted ones the key's (first)
    line lists, else every wanted one (another line may list the key under it), then the
    key's own first principal, so that a signer who is not wanted is still named."""
    folded = {p.casefold() for p in principals}
    listed = [w for w in wanted if w.casefold() in folded]
    return list(dict.fromkeys([*(listed or wanted), *principals[:1]]))


# -- the allowed signers file ------------------------------------------------------------------

#: The options of an allowed signers line stetho understands (ssh-keygen(1), ALLOWED SIGNERS).
_OPTIONS = ("cert-authority", "namespaces", "valid-after", "valid-before")
_KEY_TYPES = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|"
                        r"sk-ssh-ed25519@openssh\.com|sk-ecdsa-sha2-nistp256@openssh\.com)$")
_TOKEN = re.compile(r'(?:[^\s"]+|"[^"]*")+')
_OPTION = re.compile(r'^([a-z-]+)(?:="([^"]*)")?$')
_BLOB = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")


def check_signers(content: bytes, source: str) -> None:
    """Refuse an allowed signers file stetho cannot judge identities by, naming file:line:
    principal patterns, quoted principals, unknown options, a line without a key."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{source}: allowed signers file is not UTF-8 text") from None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source}:{n}"
        tokens = _TOKEN.findall(line)
        for principal in tokens[0].split(","):
            if not PRINCIPAL_RE.match(principal):
                raise ConfigError(f"{where}: principal {principal[:80]!r} is not supported: "
                                  "stetho reads plain names only (no patterns such as '*@corp' "
                                  "or '!name', no quotes): list each person by name")
        rest = tokens[1:]
        while rest and not _KEY_TYPES.match(rest[0]):
            for option in _split_options(rest.pop(0)):
                m = _OPTION.match(option)
                if not m or m.group(1) not in _OPTIONS:
                    raise ConfigError(f"{where}: option {option[:80]!r} is not supported "
                                      f"(stetho knows {', '.join(_OPTIONS)})")
        if len(rest) < 2 or not _BLOB.match(rest[1]):
            raise ConfigError(f"{where}: no public key (expected: principals [options] "
                              "KEYTYPE BASE64 [comment])")


def _split_options(token: str) -> list[str]:
    """`cert-authority,namespaces="a,b"` -> its options, commas inside quotes kept."""
    return [m.group(0) for m in re.finditer(r'(?:[^,"]+|"[^"]*")+', token)]
