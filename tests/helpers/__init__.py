"""Code the tests share, imported as ``tests.helpers.<module>`` (pytest puts the repository root on ``sys.path``
through ``pythonpath`` in pyproject.toml, so no test edits ``sys.path`` or loads a file by path).

- ``tiny_models``: the tiny random-weight model pair, random models of any shape, and the shipped house pair
  (its folder from ``completer.models.HOUSE_DIR``, its tokenizer); the fixtures on them are in tests/conftest.py;
- ``engine_contract``: the checks every engine backend passes (torch and vLLM);
- ``context_samples``: per-language source samples with a cursor, the token counter, ``plan_at``;
- ``docmodel``: an independent reference model of LSP document sync, for the fuzz tests;
- ``pygls_session``: helpers for tests driving the server through pytest-lsp's client;
- ``editor_tools``: where the editor clients live and finding the tools they need.

The JSON-RPC/LSP client and the wait-for-ready loop are ``lsp.client``: the benchmarks use them too, and a
benchmark must not depend on tests/.
"""
