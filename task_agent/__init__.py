"""The task agent the loop evolves. The harness loads `TaskAgent` from here."""

from task_agent.task_agent import TaskAgent

__all__ = ["TaskAgent"]
