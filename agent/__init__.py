"""Evolvable agent toolkit: LLM client, answer extraction, the agent base class.

The meta agent may rewrite anything here. The trusted core only relies on the
environment it provides: AGENT_GATEWAY_URL and AGENT_GATEWAY_KEY.
"""
