"""The meta agent the loop evolves. The optimizer loads `MetaAgent` from here."""

from meta_agent.meta_agent import MetaAgent

__all__ = ["MetaAgent"]
