"""Tools the agents can call from a tool loop (see agent/tool_loop.py).

A tool is a module with `TOOL = {"name", "description", "input_schema"}` and
`run(tool_input: dict) -> str`. `run` never raises: a failure is text the model
reads and reacts to, so one bad call cannot end the whole loop.
"""

from __future__ import annotations

MAX_OUTPUT_CHARS = 10_000


def truncate(text: str, limit: int = MAX_OUTPUT_CHARS, already_cut: int = 0) -> str:
    """`text` cut to `limit` characters, keeping head and tail, with a marker saying how much went.

    Both ends matter: the head shows what a command started doing, the tail how it
    ended (the error, the final score). `already_cut` counts characters a caller
    dropped from the middle before (it must have kept more than `limit` of each end).
    """
    if len(text) <= limit:
        return text
    half = limit // 2
    cut = already_cut + len(text) - 2 * half
    return f"{text[:half]}\n[... {cut} characters cut from the middle ...]\n{text[-half:]}"
