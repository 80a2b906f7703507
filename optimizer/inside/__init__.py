"""Trusted scripts that run inside a sandbox, mounted read-only: stdlib and the workspace only."""
