"""The sides of an A/B run: a git ref's tree exported once by commit, or a checkout folder,
and the interpreter its worker runs under.

A side runs under this interpreter, its tree first on the path, when the pins of its
``requirements.txt`` are what this environment has installed; otherwise under a
virtualenv built from those pins, cached by their digest.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..training import OrtBenchError

#: Where exported trees and virtualenvs live unless ``--cache`` says otherwise.
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ortbench" / "ab"
#: What a checkout folder holds.
PACKAGE = Path("ortbench") / "__init__.py"
_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)")


@dataclass(frozen=True)
class Checkout:
    """One side's source tree and the interpreter its worker runs under."""

    label: str
    tree: Path
    python: str
    #: "this interpreter" or "virtualenv <folder>"
    environment: str
    commit: str | None = None


def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)
    except FileNotFoundError:
        raise OrtBenchError("git is not installed: give checkout folders instead") from None


def _export(commit: str, cache: Path) -> Path:
    """The tree of ``commit``, exported once into ``cache/<commit>/src``."""
    tree = cache / commit / "src"
    if tree.is_dir():
        return tree
    archive = _git("archive", "--format=tar", commit)
    if archive.returncode:
        message = archive.stderr.decode(errors="replace").strip().splitlines()
        raise OrtBenchError(f"git archive {commit} failed: {message[-1] if message else ''}")
    tree.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=tree.parent, prefix="src-"))
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        # the safe filter where this Python has it (3.10.12, 3.11.4 and later)
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(staging, **safe)
    try:
        staging.rename(tree)
    except OSError:  # another run exported it meanwhile
        shutil.rmtree(staging)
    return tree


def _pins(tree: Path) -> dict[str, str]:
    """``name==version`` lines of the tree's requirements.txt (names normalised)."""
    path = tree / "requirements.txt"
    if not path.exists():
        return {}
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _PIN.match(line)
        if match:
            pins[re.sub(r"[-_.]+", "-", match[1]).lower()] = match[2]
    return pins


def mismatched_pins(tree: Path) -> list[str]:
    """The pins of the tree's requirements.txt this environment does not satisfy.

    Parameters
    ----------
    tree : Path
        A checkout of ortbench.

    Returns
    -------
    list of str
        ``name==wanted (installed: version)`` for each pin that differs; empty when the
        running interpreter can run the tree as it is.
    """
    wrong = []
    for name, wanted in _pins(tree).items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = "none"
        if installed != wanted:
            wrong.append(f"{name}=={wanted} (installed: {installed})")
    return wrong


def _virtualenv(tree: Path, cache: Path, log: Callable[[str], None]) -> Path:
    """A virtualenv holding the tree's pinned requirements, built once per pin set."""
    requirements = (tree / "requirements.txt").read_bytes()
    folder = cache / "venv" / hashlib.sha256(requirements).hexdigest()[:16]
    python = folder / "bin" / "python"
    done = folder / "complete"
    if done.exists():
        return python
    log(f"building a virtualenv for {tree}'s requirements in {folder}")
    shutil.rmtree(folder, ignore_errors=True)
    for command in (
        [sys.executable, "-m", "venv", str(folder)],
        [str(python), "-m", "pip", "install", "--quiet", "-r", str(tree / "requirements.txt")],
    ):
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode:
            lines = (result.stderr or result.stdout).strip().splitlines()
            raise OrtBenchError(
                f"could not build the virtualenv {folder}: {lines[-1] if lines else command}"
            )
    done.touch()
    return python


def uncommitted_files(commit: str) -> int:
    """How many tracked files of the working tree differ from ``commit`` when it is the
    checked-out commit (``HEAD``); 0 for any other commit."""
    head = _git("rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    if head.returncode or head.stdout.decode().strip() != commit:
        return 0
    status = _git("status", "--porcelain", "--untracked-files=no")
    return len(status.stdout.decode().splitlines()) if not status.returncode else 0


def checkout(ref: str, cache: Path, log: Callable[[str], None] = print) -> Checkout:
    """Resolve a side: a checkout folder as it is, or a git ref exported by commit.

    Parameters
    ----------
    ref : str
        A folder holding an ``ortbench`` package, or a git ref of the repository in the
        current directory (``HEAD``, ``origin/main``, a commit).
    cache : Path
        Where exported trees and virtualenvs are kept.
    log : callable
        Receives a line for each slow step (an export, a virtualenv build).

    Returns
    -------
    Checkout

    Raises
    ------
    OrtBenchError
        When ``ref`` is neither, or its environment cannot be built.
    """
    folder = Path(ref)
    commit = None
    if folder.is_dir():
        if not (folder / PACKAGE).exists():
            raise OrtBenchError(f"{ref} is a folder without {PACKAGE}: not an ortbench checkout")
        tree = folder.resolve()
    else:
        if _git("rev-parse", "--git-dir").returncode:
            raise OrtBenchError(
                f"{ref} is not a folder, and the current directory is not in a git "
                "repository to find it as a ref: run ab from your ortbench clone"
            )
        resolved = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        if resolved.returncode:
            raise OrtBenchError(
                f"{ref} is neither a checkout folder nor a git ref of the repository here"
            )
        commit = resolved.stdout.decode().strip()
        changed = uncommitted_files(commit)
        if changed:
            log(
                f"{ref} is commit {commit[:8]}: {changed} files have uncommitted changes it "
                f"does not hold; pass . to time the working tree"
            )
        tree = _export(commit, cache)
        if not (tree / PACKAGE).exists():
            raise OrtBenchError(f"{ref} ({commit[:8]}) holds no {PACKAGE}")
    if mismatched_pins(tree):
        python = _virtualenv(tree, cache, log)
        return Checkout(ref, tree, str(python), f"virtualenv {python.parent.parent}", commit)
    return Checkout(ref, tree, sys.executable, "this interpreter", commit)
