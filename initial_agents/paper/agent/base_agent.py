"""The base of the paper's agents: the reference's agent/base_agent.py with its utils/thread_logger.py.

Reproduced: an agent holds its model name and a transcript file that is emptied when the agent is
made; every `log` call appends one line-terminated record, from any number of threads at once, and
never raises into the agent (the reference logs through `logging`, whose handlers swallow errors).
Different: no rotation at 10 MB; and `chat_history_file=None` (the default here) keeps no
transcript, so an agent made without one writes no file into the folder it runs in.
"""

import threading
from abc import ABC, abstractmethod
from pathlib import Path

DEFAULT_MODEL = "openai/gpt-4o"  # the reference's default model

# One lock for every transcript: a worker answers rows on several threads, and two agents may share a file.
_WRITE_LOCK = threading.Lock()


class AgentSystem(ABC):
    def __init__(self, model=DEFAULT_MODEL, chat_history_file=None):
        self.model = model
        self.chat_history_file = chat_history_file
        if chat_history_file:
            path = Path(chat_history_file)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("", encoding="utf-8")

    def log(self, message):
        """Append `message` to the transcript, if there is one."""
        if not self.chat_history_file:
            return
        try:
            # backslashreplace: model text can hold lone surrogates, which strict UTF-8 refuses.
            with _WRITE_LOCK, open(self.chat_history_file, "a", encoding="utf-8", errors="backslashreplace") as f:
                f.write(f"{message}\n")
        except (OSError, ValueError):
            pass

    @abstractmethod
    def forward(self, *args, **kwargs):
        """Do the agent's work; what it takes and returns is the subclass's."""
