"""What a pyspark type's code is: the files that ship with it, and the modules they import.

A type ships its entry file alone, or, with `code`, every file under that folder (the folder is the
import root: Glue puts its zip on `sys.path`, the offline runtime the folder itself). The imports the
entry reaches are read from the source, never run: `imports_of` follows the entry through the modules of
its own folder and returns every absolute import that leaves it, so `cdk synth` can refuse a module that
will not be there on Glue (`longjobs.construct.job_code`). Imports the source cannot name
(`importlib.import_module(name)`, `__import__`) are returned apart, to be warned about.

An import inside `try: ... except ImportError:` is optional: the code has a fallback, so it is reported
as optional, not as missing.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from longjobs.engine.jobs.types import JobType, JobTypeError

SKIPPED_PARTS = frozenset({"__pycache__", ".git", ".venv", ".mypy_cache", ".pytest_cache", ".ruff_cache"})
"""Folders of a code root that never ship (caches and tools' state)."""

CACHE_ENV = "LONGJOBS_CACHE"
"""Names the folder where synth keeps downloaded wheels and the offline runtime installed requirements
(default: `$XDG_CACHE_HOME/longjobs`, else `~/.cache/longjobs`)."""

_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


@dataclass(frozen=True)
class Import:
    """One module a file imports: its absolute dotted name (for `from a import b`, `a.b`: `b` may be a
    submodule), the module the statement names (`a`), and where the import is."""

    module: str
    file: Path
    line: int
    optional: bool = False
    named: str = ""

    @property
    def top(self) -> str:
        return self.module.split(".")[0]

    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class CodeImports:
    """What a type's code imports from outside itself, and the imports it makes by name at run time."""

    external: tuple[Import, ...]
    dynamic: tuple[Import, ...]
    files: tuple[Path, ...]
    """The type's own files the entry reaches (the entry first)."""


def cache_dir() -> Path:
    named = os.environ.get(CACHE_ENV)
    if named:
        return Path(named)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "longjobs"


def pip_into(folder: Path, arguments: Callable[[Path], list[str]], finish: Callable[[Path], None] | None = None) -> str:
    """Run `python -m pip` with `arguments(target)` into a new folder beside `folder`, `finish` it, then move
    it into place: a run beside this one (parallel synths, two offline workers) sees all of it or nothing.
    Returns "" when done, else pip's last line of error (and leaves nothing behind)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    done = subprocess.run(
        [sys.executable, "-m", "pip", *arguments(partial)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        detail = (done.stderr or done.stdout).strip().splitlines()
        return detail[-1] if detail else f"pip exited with {done.returncode}"
    if finish is not None:
        finish(partial)
    try:
        partial.rename(folder)
    except OSError:  # the same folder was put in place first by a run beside this one
        shutil.rmtree(partial, ignore_errors=True)
    return ""


def shipped_files(job_type: JobType) -> list[tuple[Path, str]]:
    """Each file that ships with the type and its path inside the shipped zip, sorted by that path."""
    root = job_type.code_root
    if root is None:
        return [(job_type.entry_file, job_type.entry_file.name)]
    return sorted(
        ((path, path.relative_to(root).as_posix()) for path in _walk(root)),
        key=lambda pair: pair[1],
    )


def top_level_names(job_type: JobType) -> set[str]:
    """The module and package names the type's shipped code puts at the top of `sys.path`."""
    names = set()
    for _, inside in shipped_files(job_type):
        first = inside.split("/")[0]
        names.add(first.removesuffix(".py") if "/" not in inside else first)
    return {name for name in names if name.isidentifier()}


def imports_of(job_type: JobType) -> CodeImports:
    """The imports of the entry and of every module of its code root it reaches, transitively."""
    root = job_type.code_root
    entry = job_type.entry_file
    queue: list[tuple[Path, str]] = [(entry, job_type.entry_module)]
    seen: set[Path] = set()
    external: list[Import] = []
    dynamic: list[Import] = []
    files: list[Path] = []
    while queue:
        path, module = queue.pop(0)
        if path.resolve() in seen:
            continue
        seen.add(path.resolve())
        files.append(path)
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except SyntaxError as exc:  # a module the entry imports, which `check_files` does not read
            raise JobTypeError(
                f"job type {job_type.name!r}: {path} is not valid Python: {exc.msg} (line {exc.lineno})"
            ) from None
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for found in _imports(tree, path, package):
            if found.module == "":
                dynamic.append(found)
                continue
            own = _own_files(root, found.module) if root is not None else []
            if own:
                queue += own
            elif root is None and found.module == entry.stem:
                continue
            else:
                external.append(found)
    return CodeImports(external=tuple(external), dynamic=tuple(dynamic), files=tuple(files))


def _walk(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if path.is_file() and not SKIPPED_PARTS.intersection(relative.parts) and path.suffix != ".pyc":
            yield path


def _own_files(root: Path, module: str) -> list[tuple[Path, str]]:
    """The files of `root` that importing `module` runs: each package's `__init__.py` on the way, then
    the module itself. Empty when the module is not one of the root's."""
    parts = module.split(".")
    found: list[tuple[Path, str]] = []
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        folder = root.joinpath(*parts[:depth])
        if (folder / "__init__.py").is_file():
            found.append((folder / "__init__.py", name))
        elif folder.with_suffix(".py").is_file():
            found.append((folder.with_suffix(".py"), name))
            break
        elif not folder.is_dir():
            break  # a name the root does not have (an attribute imported from a module, or not ours)
    return found


def _imports(tree: ast.AST, path: Path, package: str) -> Iterator[Import]:
    optional_lines = _optional_lines(tree)
    for node in ast.walk(tree):
        optional = getattr(node, "lineno", 0) in optional_lines
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, path, node.lineno, optional, named=alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            if base is None:
                continue
            for alias in node.names:
                # `from a import b` may import the submodule a.b; `_own_files` and the check both accept
                # a name that is an attribute of `a` instead.
                module = f"{base}.{alias.name}" if alias.name != "*" else base
                yield Import(module, path, node.lineno, optional, named=base)
        elif isinstance(node, ast.Call) and _is_dynamic_import(node):
            yield Import("", path, node.lineno, optional)


def _absolute(node: ast.ImportFrom, package: str) -> str | None:
    if node.level == 0:
        return node.module
    parts = package.split(".") if package else []
    if node.level - 1 > len(parts):
        return None  # beyond the code root: Python refuses it too
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _is_dynamic_import(node: ast.Call) -> bool:
    func = node.func
    if isinstance(func, ast.Name) and func.id == "__import__":
        return True
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


def _optional_lines(tree: ast.AST) -> set[int]:
    """Lines of the bodies of `try` statements that catch an import's failure."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(_catches_import_error(handler) for handler in node.handlers):
            for statement in node.body:
                for inner in ast.walk(statement):
                    if hasattr(inner, "lineno"):
                        lines.add(inner.lineno)
    return lines


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(name, ast.Name) and name.id in _IMPORT_ERRORS for name in names)
