"""A file editor tool in the style of the `str_replace_editor` that models are trained on.

Edits return the changed region with line numbers, so the model sees the result
without another `view`. Every edit first saves the file's previous content, so
`undo_edit` can step back one edit at a time.
"""

from __future__ import annotations

import os
from pathlib import Path

from agent.tools import truncate

SNIPPET_LINES = 4  # context shown around an edit
LIST_DEPTH = 2

TOOL = {
    "name": "editor",
    "description": (
        "View, create and edit files. Paths must be absolute.\n"
        "- view: a file with line numbers (optionally only `view_range` [start, end], 1-based, end -1 = last "
        "line), or a directory's files up to 2 levels deep (hidden ones excluded).\n"
        "- create: write `file_text` to `path` (parent folders are created; an existing file is overwritten).\n"
        "- str_replace: replace `old_str`, which must occur exactly once in the file, with `new_str` "
        "(empty or missing deletes it). Include enough surrounding lines to make `old_str` unique; "
        "whitespace must match exactly.\n"
        "- insert: insert `new_str` after line `insert_line` (0 inserts at the top).\n"
        "- undo_edit: restore the file as it was before its last edit."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert", "undo_edit"]},
            "path": {"type": "string", "description": "Absolute path of the file or directory."},
            "file_text": {"type": "string", "description": "Content for `create`."},
            "old_str": {"type": "string", "description": "Text to replace, for `str_replace`."},
            "new_str": {"type": "string", "description": "Replacement for `str_replace`, or text for `insert`."},
            "insert_line": {"type": "integer", "description": "For `insert`: the line after which to insert."},
            "view_range": {
                "type": "array", "items": {"type": "integer"},
                "description": "For `view` of a file: [start, end] lines, end -1 meaning the last line.",
            },
        },
        "required": ["command", "path"],
    },
}

# path -> earlier contents, newest last; None means the file did not exist.
_history: dict[Path, list[str | None]] = {}


class EditError(Exception):
    """A mistake in the request; its message is what the model reads."""


def run(tool_input: dict) -> str:
    try:
        command = tool_input.get("command")
        if command not in COMMANDS:
            raise EditError(f"unknown command {command!r}; use one of {', '.join(COMMANDS)}.")
        raw_path = tool_input.get("path")
        if not isinstance(raw_path, str) or not os.path.isabs(raw_path):
            raise EditError(f"`path` must be an absolute path, got {raw_path!r}.")
        # Normalized, so one file reached by two spellings shares one undo history.
        return COMMANDS[command](Path(os.path.normpath(raw_path)), tool_input)
    except EditError as e:
        return f"Error: {e}"
    except Exception as e:  # the loop must go on; the model reads what went wrong
        return f"Error: {type(e).__name__}: {e}"


def reset() -> None:
    """Forget the undo history."""
    _history.clear()


# Reading and writing with surrogateescape keeps bytes that are not UTF-8 intact on edit.
def _read(path: Path) -> str:
    if not path.is_file():
        raise EditError(f"{path} is not a file." if path.exists() else f"{path} does not exist.")
    return path.read_text(encoding="utf-8", errors="surrogateescape")


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8", errors="surrogateescape")


def _save_for_undo(path: Path) -> None:
    _history.setdefault(path, []).append(_read(path) if path.exists() else None)


def _numbered(text: str, first: int = 1) -> str:
    """`cat -n` style lines; text not valid UTF-8 is shown with replacement characters."""
    shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(shown.split("\n"), first))


def _lines(text: str) -> list[str]:
    """The file's lines: a final newline ends the last line, it does not start a new one."""
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return lines


def _snippet(text: str, first: int, last: int) -> str:
    """Lines first..last (1-based) of `text` with SNIPPET_LINES of context either side."""
    lines = _lines(text)
    start = max(1, first - SNIPPET_LINES)
    end = min(len(lines), last + SNIPPET_LINES)
    return truncate(_numbered("\n".join(lines[start - 1:end]), start))


def _view(path: Path, args: dict) -> str:
    if path.is_dir():
        if args.get("view_range") is not None:
            raise EditError("`view_range` applies to files, not directories.")
        return truncate(f"Files in {path}, up to {LIST_DEPTH} levels deep:\n" + "\n".join(_listing(path)))
    lines = _lines(_read(path))
    first, last = 1, len(lines)
    view_range = args.get("view_range")
    if view_range is not None:
        if (not isinstance(view_range, list) or len(view_range) != 2
                or not all(isinstance(n, int) for n in view_range)):
            raise EditError("`view_range` must be two integers [start, end].")
        first, last = view_range
        # An end past the file is read as "to the end": cheaper than an error and a retry.
        last = len(lines) if last == -1 else min(last, len(lines))
        if not 1 <= first <= last:
            raise EditError(f"`view_range` {view_range} does not fit the file's lines 1..{len(lines)}.")
    if not lines:
        return f"{path} is empty."
    return truncate(_numbered("\n".join(lines[first - 1:last]), first))


def _listing(root: Path) -> list[str]:
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found += [os.path.join(folder, f) for f in files if not f.startswith(".")]
        found += [os.path.join(folder, d) + "/" for d in dirs]
        if len(Path(folder).relative_to(root).parts) + 1 >= LIST_DEPTH:
            dirs[:] = []  # listed, not entered
    return sorted(found)


def _create(path: Path, args: dict) -> str:
    text = args.get("file_text")
    if not isinstance(text, str):
        raise EditError("`create` needs `file_text`.")
    if path.is_dir():
        raise EditError(f"{path} is a directory.")
    existed = path.exists()
    _save_for_undo(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, text)
    return f"{'Overwrote' if existed else 'Created'} {path} ({len(text.splitlines())} lines)."


def _str_replace(path: Path, args: dict) -> str:
    old, new = args.get("old_str"), args.get("new_str") or ""
    if not isinstance(old, str) or not old:
        raise EditError("`str_replace` needs a non-empty `old_str`.")
    if not isinstance(new, str):
        raise EditError("`new_str` must be a string.")
    text = _read(path)
    count = text.count(old)
    if count == 0:
        raise EditError(f"no replacement made: `old_str` does not occur verbatim in {path}.")
    if count > 1:
        starts, at = [], -1
        while (at := text.find(old, at + 1)) != -1:
            starts.append(str(text.count("\n", 0, at) + 1))
        raise EditError(f"no replacement made: `old_str` occurs {count} times in {path} (starting at lines "
                        f"{', '.join(starts)}); include more context to make it unique.")
    _save_for_undo(path)
    at = text.index(old)
    updated = text[:at] + new + text[at + len(old):]
    _write(path, updated)
    first = text.count("\n", 0, at) + 1
    return f"Edited {path}:\n" + _snippet(updated, first, first + new.count("\n"))


def _insert(path: Path, args: dict) -> str:
    new, after = args.get("new_str"), args.get("insert_line")
    if not isinstance(new, str):
        raise EditError("`insert` needs `new_str`.")
    text = _read(path)
    n_lines = len(_lines(text))
    if not isinstance(after, int) or isinstance(after, bool) or not 0 <= after <= n_lines:
        raise EditError(f"`insert_line` must be an integer from 0 to {n_lines}, got {after!r}.")
    # A trailing newline on `new_str` ends its last line; it does not ask for an extra blank line.
    added = new.removesuffix("\n").split("\n")
    lines = text.split("\n")  # keeps the final newline as a last empty item, so joining restores it
    updated = "\n".join(lines[:after] + added + lines[after:])
    _save_for_undo(path)
    _write(path, updated)
    return f"Inserted into {path}:\n" + _snippet(updated, after + 1, after + len(added))


def _undo_edit(path: Path, args: dict) -> str:
    stack = _history.get(path)
    if not stack:
        raise EditError(f"no edit of {path} to undo.")
    previous = stack.pop()
    if previous is None:
        path.unlink(missing_ok=True)
        return f"Undid the creation of {path}: the file is removed."
    _write(path, previous)
    return f"Restored {path} to its content before the last edit ({len(_lines(previous))} lines)."


COMMANDS = {
    "view": _view,
    "create": _create,
    "str_replace": _str_replace,
    "insert": _insert,
    "undo_edit": _undo_edit,
}
