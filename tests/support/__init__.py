"""What the tests share: fake model servers, a synthetic run, a browser, the command-line helpers.

Imported as `support.<module>` (conftest.py puts tests/ on sys.path, and so do the benches),
so that no test module imports another test module."""
