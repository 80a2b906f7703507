"""Evolvable agent toolkit: LLM client, answer extraction, the agent base class.

The meta agent may rewrite anything here. The trusted core only relies on the
environment it provides: AGENT_GATEWAY_URL and AGENT_GATEWAY_KEY. The evaluation
counts a row's calls from the audit event agent/llm.py raises per call
(`USAGE_EVENT`); a client that does not raise it still works, uncounted per row
(the gateway's ledger books every call regardless).
"""
