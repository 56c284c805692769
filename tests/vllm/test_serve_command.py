"""``completer serve``'s ``vllm serve`` command line, parsed back by vLLM's own server argument parser, gives the
engine arguments the in-process vLLM backend builds from the same settings: one configuration for both ends."""

import importlib.util

import pytest

from completer.engine import EngineConfig
from completer.engine.remote.serve import serve_command, vllm_kwargs


@pytest.mark.parametrize("settings", [
    dict(speculation="none", enforce_eager=True, dtype="float32"),
    dict(speculation="ngram", num_speculative_tokens=3, prefix_cache=False),
    dict(speculation="draft", num_speculative_tokens=2, gpu_memory_utilization=0.5),
    dict(speculation="eagle3", num_speculative_tokens=3, draft_quantization="fp8", async_scheduling=False),
])
def test_vllm_parses_the_serve_command_to_the_backends_engine_arguments(settings):
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed in this Python (CI runs tests/vllm with .venv-vllm's python)")
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    config = EngineConfig(backend="vllm", model="house:v2/target", draft="house:v2/draft", **settings)
    cmd = serve_command(config, port=8123, served_model_name="m")
    assert cmd[:3] == ["vllm", "serve", vllm_kwargs(config)["model"]]
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(cmd[3:])
    assert (args.port, args.served_model_name) == (8123, ["m"])
    parsed = AsyncEngineArgs.from_cli_args(args)
    for key, want in vllm_kwargs(config).items():
        if key in ("model", "disable_log_stats"):
            continue
        got = getattr(parsed, key)
        assert got == want or (isinstance(got, str) and str(want) == got), (key, got, want)
