"""The base of every agent: a model name and a transcript file."""

from __future__ import annotations

import threading
from pathlib import Path


class AgentSystem:
    def __init__(self, model: str, chat_history_file: str | None = None):
        self.model = model
        self.chat_history_file = chat_history_file
        self._lock = threading.Lock()
        if chat_history_file:
            Path(chat_history_file).parent.mkdir(parents=True, exist_ok=True)
            Path(chat_history_file).write_text("")

    def log(self, text: str) -> None:
        """Append `text` to the transcript (a markdown file per question)."""
        if not self.chat_history_file:
            return
        with self._lock, open(self.chat_history_file, "a", encoding="utf-8") as f:
            f.write(str(text).rstrip("\n") + "\n\n")

    def log_messages(self, messages: list[dict]) -> None:
        for m in messages:
            self.log(f"## {m['role']}\n\n{m['content']}")
