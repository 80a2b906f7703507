"""How the core runs git: the environment and options that close every place git reads configuration,
hooks and attributes from besides the repository, and the repository itself checked before any git
command runs on it.

The repository may come from a folder someone handed over, and git obeys what a repository's own
files say: its config (a promisor remote whose `ext::` URL is a shell command git runs to fetch a
missing object, `protocol.*.allow` overriding the command line's, `include.path` to a fifo that
hangs git, diff drivers and `xfuncname` patterns), `objects/info/alternates` (objects read from any
git store of the host), `info/attributes` and `info/grafts`. GIT_ENV and GIT_OPTIONS cannot take
precedence over all of them, so a repository is used only when
its files are the ones `git init --bare` and the project write: a config of the keys `git init`
writes, and none of those other files. Anything else is refused in one line.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from services.errors import UserError

# Git reads configuration, hooks and attributes from several places besides the repository's own
# config; each is closed here (no protocol at all, no lazy fetch), and the repository's own files are
# checked before git runs on it (check_repository): a run folder may be someone else's.
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_ATTR_NOSYSTEM": "1",
           "GIT_NO_REPLACE_OBJECTS": "1", "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0",
           "GIT_ALLOW_PROTOCOL": "", "GIT_NO_LAZY_FETCH": "1",
           "GIT_AUTHOR_NAME": "hyperagents", "GIT_AUTHOR_EMAIL": "hyperagents@localhost",
           "GIT_COMMITTER_NAME": "hyperagents", "GIT_COMMITTER_EMAIL": "hyperagents@localhost",
           "HOME": os.devnull, "XDG_CONFIG_HOME": os.devnull, "LC_ALL": "C"}
DIFF_TIMEOUT_S = 20.0  # a diff of agent code past this is recorded by its files only (git's diff is super-linear)
GIT_TIMEOUT_S = 600.0  # any other git command: a fifo among a handed repository's objects would block it
GIT_OPTIONS = ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.attributesFile=/dev/null",
               "-c", "core.autocrlf=false", "-c", "commit.gpgsign=false", "-c", "diff.external=",
               "-c", "core.pager=cat", "-c", "protocol.allow=never"]

MAX_CONFIG_BYTES = 4096  # `git init --bare` writes 66 bytes
ALLOWED_CONFIG = {"core.repositoryformatversion": {"0"}, "core.filemode": {"true", "false"},
                  "core.bare": {"true", "false"}, "core.logallrefupdates": {"true", "false"}}
FORBIDDEN = ("objects/info/alternates", "objects/info/http-alternates", "info/attributes", "info/grafts",
             "commondir", "gitdir", "config.worktree", "worktrees")
FOLDERS = ("objects", "refs")  # must be folders of the repository itself, not links elsewhere
MAX_ENTRIES = 500_000  # files and folders of a repository walked (a run of 1,000 nodes has ~30,000)


def odd_entry(git_dir: Path) -> str | None:
    """The first entry of the repository git would follow or block on (a link, a fifo, a device, a file
    of two names, which git appends to or replaces through), or that makes it too large to walk; None."""
    seen, stack = 0, [git_dir]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                seen += 1
                if seen > MAX_ENTRIES:
                    return f"more than {MAX_ENTRIES:,} files"
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    stack.append(Path(entry.path))
                elif not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
                    return os.path.relpath(entry.path, git_dir)
    return None


def config_entries(text: str) -> list[tuple[str, str]]:
    """The (section.key, value) pairs of a plain git config: one `[section]` header (no subsection,
    no include) and `key = value` lines; ValueError for any other shape."""
    entries, section = [], None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            name = line[1:-1].strip().lower()
            if not name.isalpha():
                raise ValueError(f"section {line[:40]!r}")
            section = name
            continue
        key, equals, value = line.partition("=")
        key = key.strip().lower()
        if section is None or not equals or not key.isalpha():
            raise ValueError(f"line {line[:40]!r}")
        entries.append((f"{section}.{key}", value.strip().lower()))
    return entries


def check_repository(git_dir: Path) -> None:
    """Refuse a repository whose files could steer git (see the module's docstring); UserError."""
    where = f"{git_dir}: not a repository this project made"
    try:
        if not stat.S_ISDIR(os.lstat(git_dir).st_mode):
            raise UserError(f"{where} (it is not a folder)")
        for name in FOLDERS:
            if os.path.lexists(git_dir / name) and not stat.S_ISDIR(os.lstat(git_dir / name).st_mode):
                raise UserError(f"{where} ({name} is not a folder of its own)")
        present = [name for name in FORBIDDEN if os.path.lexists(git_dir / name)]
        if present:
            raise UserError(f"{where} (it has {present[0]}, which would make git read or run what it names)")
        odd = odd_entry(git_dir)
        if odd is not None:
            raise UserError(f"{where} ({odd[:200]}: git would follow, block on or write through it)")
        fd = os.open(git_dir / "config", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise UserError(f"{where} (its config is not a regular file)")
            data = os.read(fd, MAX_CONFIG_BYTES + 1)
        finally:
            os.close(fd)
    except OSError as e:
        raise UserError(f"{where} ({e.strerror or e})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise UserError(f"{where} (its config is over {MAX_CONFIG_BYTES} bytes)")
    try:
        entries = config_entries(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise UserError(f"{where} (its config has a {str(e)[:80]})") from None
    for key, value in entries:
        if value not in ALLOWED_CONFIG.get(key, set()):
            raise UserError(f"{where} (its config sets {key[:60]!r}, which git would obey)")
