"""Code the tests share, imported as ``tests.helpers.<module>`` (pytest puts the repository root on ``sys.path``
through ``pythonpath`` in pyproject.toml, so no test edits ``sys.path`` or loads a file by path).

- ``tiny_models``: the tiny random-weight model pair and the house pair's location (``completer.models.HOUSE_DIR``);
- ``engine_contract``: the checks every engine backend passes (torch and vLLM);
- ``context_samples``: per-language source samples with a cursor, and the token counter;
- the one JSON-RPC/LSP client and the wait-for-ready loop live in ``bench.lspclient`` (benchmarks use them too,
  and a benchmark must not depend on tests/).
"""
