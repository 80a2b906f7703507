"""Baseline task agents: published or simple methods a run can start from instead of the seed.

Each module here defines `TaskAgent` with the same contract as `task_agent/task_agent.py`
and a `DOMAINS` tuple naming the domains it handles. A run picks one with
`--initial_agent NAME` (NAME is the module name, e.g. `proofautograder`); the package
`task_agent/__init__.py` imports `TaskAgent` from the chosen module, so that is the entry
the harness loads, and the meta agent evolves onwards from it like from any other node.
"""
