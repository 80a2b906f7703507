"""A file viewer and editor with the reference's semantics (agent/tools/edit.py).

Reproduced:
- paths must be absolute; every command but `create` needs the path to exist; `create` refuses a
  path that exists, and refuses empty text; a folder can only be viewed;
- `view` of a file numbers its lines as `cat -n` does, all of them or a range [start, end] (from 1;
  end -1 means to the last line); `view` of a folder lists it two levels deep, hidden entries left out;
- text over CLIP_AT characters (CLIP_LISTING_AT for a listing) keeps its first and last halves around
  a `<response clipped>` line; a file is clipped before its lines are numbered, as in the reference;
- `str_replace` needs a non-empty `old_str` that occurs exactly once; it and `insert` expand tabs in
  the whole file; both answer with the edited lines and about four lines around them;
- each edit saves the file's text before it, and `create` saves the new text, for `undo_edit`
  (so undoing a creation leaves the file as it was created); the history lasts as long as the process;
- every failure is returned as "Error: ..." text.
Different: the listing is sorted (the reference prints `find`'s directory order) and made in Python;
files are read and written as UTF-8 whatever the locale.
"""

import os
from pathlib import Path

CLIP_AT = 10_000
CLIP_LISTING_AT = 5_000
CLIP_MARK = "<response clipped>"

_history = {}  # path -> earlier texts, the latest last


def tool_info():
    return {
        "name": "editor",
        "description": """A tool to view, create and edit files.
* State is kept from one command call to the next, and across the conversation with the user.
* `view` shows a file as `cat -n` does; on a folder, it lists the files and folders in it down to 2 levels, hidden ones left out.
* `create` refuses a `path` where a file is already present.
* Output that is too long is cut short; the cut shows as `<response clipped>`.
* `undo_edit` puts the file at `path` back as it was before its latest edit.
\nAbout the `str_replace` command:
* `old_str` must match one or more whole consecutive lines of the file EXACTLY, whitespace included.
* If `old_str` occurs more than once in the file, nothing is replaced: give enough surrounding text to make it unique.
* `new_str` holds the lines that take the place of `old_str`.""",
        "input_schema": {
            "type": "object",
            "properties": {
                "command": {
                    "type": "string",
                    "enum": ["view", "create", "str_replace", "insert", "undo_edit"],
                    "description": "What to do: one of `view`, `create`, `str_replace`, `insert`, `undo_edit`.",
                },
                "file_text": {
                    "description": "For `create` (required): the text of the new file.",
                    "type": "string",
                },
                "insert_line": {
                    "description": "For `insert` (required): `new_str` goes in AFTER this line of `path`.",
                    "type": "integer",
                },
                "new_str": {
                    "description": "For `str_replace` (required): the new text. For `insert` (required): what goes in.",
                    "type": "string",
                },
                "old_str": {
                    "description": "For `str_replace` (required): the text of `path` that is replaced.",
                    "type": "string",
                },
                "path": {
                    "description": "The absolute path of a file or folder, such as `/repo/task_agent.py` or the folder `/repo`.",
                    "type": "string",
                },
                "view_range": {
                    "description": "For `view` of a file (optional): without it the whole file is shown; with it, the "
                    "lines in that range, counted from 1: [11, 12] is lines 11 and 12, and "
                    "`[start_line, -1]` shows everything from `start_line` on.",
                    "items": {"type": "integer"},
                    "type": "array",
                },
            },
            "required": ["command", "path"],
        },
    }


def clip(text, limit=CLIP_AT):
    """`text`, or its two ends around the clip mark when it is longer than `limit`."""
    if len(text) <= limit:
        return text
    return f"{text[:limit // 2]}\n{CLIP_MARK}\n{text[-(limit // 2):]}"


def numbered(text, label, first=1):
    """`text` (clipped, tabs expanded) with line numbers from `first`, under a line naming `label`."""
    lines = clip(text).expandtabs().split("\n")
    body = "\n".join(f"{first + i:6}\t{line}" for i, line in enumerate(lines))
    return f"`cat -n` of {label}:\n{body}\n"


def _checked(path, command):
    target = Path(path)
    if not target.is_absolute():
        raise ValueError(f"{path} is relative: give it from the root, starting with '/'.")
    if command != "create" and not target.exists():
        raise ValueError(f"{path} does not exist; give a path that does.")
    if command == "create" and target.exists():
        raise ValueError(f"{path} already exists; `create` does not overwrite files.")
    if target.is_dir() and command != "view":
        raise ValueError(f"{path} is a folder; `view` is the only command for folders.")
    return target


def _read(target):
    return target.read_text(encoding="utf-8")


def _write(target, text):
    target.write_text(text, encoding="utf-8")


def _save(target, text):
    _history.setdefault(str(target), []).append(text)


def _listing(root):
    """`root` and what is in it down to two levels, one path a line, hidden names left out."""
    found = [str(root)]

    def walk(folder, depth):
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if entry.name.startswith("."):
                continue
            found.append(entry.path)
            if depth < 2 and entry.is_dir(follow_symlinks=False):
                walk(entry.path, depth + 1)

    walk(root, 1)
    return "".join(f"{line}\n" for line in found)


def _view(target, view_range=None, **_):
    if target.is_dir():
        if view_range:
            raise ValueError("`view_range` applies to files only, and `path` is a folder.")
        return (f"Files and folders in {target}, down to 2 levels, hidden ones left out:\n"
                f"{clip(_listing(target), CLIP_LISTING_AT)}")
    text = _read(target)
    if not view_range:
        return numbered(text, str(target))
    if len(view_range) != 2 or not all(isinstance(n, int) for n in view_range):
        raise ValueError("`view_range` must hold exactly two integers.")
    lines = text.split("\n")
    start, end = view_range
    if not 1 <= start <= len(lines):
        raise ValueError(f"`view_range` {view_range}: its first number must be from 1 to {len(lines)}.")
    if end != -1 and end > len(lines):
        raise ValueError(f"`view_range` {view_range}: its second number must be at most {len(lines)}.")
    if end != -1 and end < start:
        raise ValueError(f"`view_range` {view_range}: its second number must not be below the first.")
    return numbered("\n".join(lines[start - 1:None if end == -1 else end]), str(target), start)


def _create(target, file_text=None, **_):
    if not file_text:
        raise ValueError("`create` needs `file_text`.")
    _write(target, file_text)
    _save(target, file_text)
    return f"Created the file {target}."


def _str_replace(target, old_str=None, new_str=None, **_):
    if not old_str:
        raise ValueError("`str_replace` needs `old_str`.")
    text, old = _read(target).expandtabs(), old_str.expandtabs()
    new = new_str.expandtabs() if new_str is not None else ""
    count = text.count(old)
    if count == 0:
        raise ValueError(f"Nothing replaced: `{old}` does not occur verbatim in {target}.")
    if count > 1:
        where = [n for n, line in enumerate(text.split("\n"), 1) if old in line]
        raise ValueError(f"Nothing replaced: `{old}` occurs {count} times (lines {where}); make it unique.")
    _save(target, text)
    updated = text.replace(old, new)
    _write(target, updated)
    at = text[:text.index(old)].count("\n")
    first = max(0, at - 4)
    excerpt = "\n".join(updated.split("\n")[first:at + 4 + new.count("\n") + 1])
    return (f"Edited {target}. " + numbered(excerpt, f"an excerpt of {target}", first + 1)
            + "Check that the change is the one you meant, and edit again if it is not.")


def _insert(target, insert_line=None, new_str=None, **_):
    if insert_line is None:
        raise ValueError("`insert` needs `insert_line`.")
    if new_str is None:
        raise ValueError("`insert` needs `new_str`.")
    text, new = _read(target).expandtabs(), new_str.expandtabs()
    lines = text.split("\n")
    if not 0 <= insert_line <= len(lines):
        raise ValueError(f"`insert_line` {insert_line} must be from 0 to {len(lines)}.")
    _save(target, text)
    added = new.split("\n")
    _write(target, "\n".join(lines[:insert_line] + added + lines[insert_line:]))
    excerpt = lines[max(0, insert_line - 4):insert_line] + added + lines[insert_line:insert_line + 4]
    return (f"Edited {target}. " + numbered("\n".join(excerpt), f"an excerpt of {target}", max(1, insert_line - 3))
            + "Check the change (indentation, no repeated lines and so on), and edit again if needed.")


def _undo_edit(target, **_):
    earlier = _history.get(str(target))
    if not earlier:
        return f"There is no edit of {target} to undo."
    text = earlier.pop()
    _write(target, text)
    return f"Took back the latest edit of {target}. " + numbered(text, str(target))


_COMMANDS = {"view": _view, "create": _create, "str_replace": _str_replace, "insert": _insert,
             "undo_edit": _undo_edit}


def tool_function(command, path, file_text=None, view_range=None, old_str=None, new_str=None, insert_line=None):
    """Do `command` on `path`; its result, or "Error: ..." text."""
    try:
        target = _checked(path, command)
        if command not in _COMMANDS:
            raise ValueError(f"Unknown command {command!r}; use one of {', '.join(_COMMANDS)}.")
        return _COMMANDS[command](target, file_text=file_text, view_range=view_range, old_str=old_str,
                                  new_str=new_str, insert_line=insert_line)
    except Exception as e:
        return f"Error: {e}"
