"""Trusted scripts that run inside a sandbox, next to agent code.

The whole folder is mounted read-only at /opt/hyperagents in every sandbox: the relay to
the gateway, the task-agent worker, the routing of an agent's own litellm calls, the meta
agent's runner and try command, and the answer checks the try command uses. They import
only the standard library and each other (and math_verify for answers), by bare module
name as scripts run from this folder do (`from answers import check_output`); the host
imports the few it shares as `inside.X`. tests/test_layers.py keeps that true. litellm is
imported only by warm_up.py, which the host's gateway runs, and by agent code that brings
its own client (route.py then sends its calls to the gateway).
"""
