"""End-to-end fixtures: the real ``completer-lsp`` process, a real client (pytest-lsp over stdio), a real engine.

The engine runs the shipped house pair when it is there; otherwise (early in the project, before the models land)
a tiny random-weight pair built here in a second, so the protocol and lifecycle are still exercised end to end.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

import pytest
import pytest_asyncio
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

sys.path.insert(0, str(Path(__file__).parent))
from e2e_helpers import init_params, wait_engine_ready  # noqa: E402

HOUSE = Path(__file__).resolve().parents[2] / "completer" / "models" / "house"
SPECIAL = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>", "<|file_sep|>"]
SERVER = [sys.executable, "-m", "lsp.server", "--log-level", "WARNING"]


# every setting a test may change, at its value for tests (maxTokens small so the suite stays fast)
TEST_DEFAULTS = {"maxTokens": 16, "debounceMs": 5, "contextBudgetTokens": 1024, "cancelStaleRequests": True,
                 "typeThroughCache": True, "template": "auto"}


def house_available() -> bool:
    return all((HOUSE / n / "model.safetensors").is_file() for n in ("target", "draft"))


def _tiny_pair(root: Path) -> tuple[str, str]:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from completer.models.llama import LlamaForCausalLM, ModelConfig

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train([str(stdlib / n) for n in ("textwrap.py", "bisect.py")],
              trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    out = []
    for name, layers in (("target", 2), ("draft", 1)):
        cfg = ModelConfig(vocab_size=400, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                          eos_token_id=0, tie_word_embeddings=False)
        model = LlamaForCausalLM(cfg)
        model.init_weights(7)
        with torch.no_grad():
            model.model.norm.weight.fill_(12.0)
        model.save_pretrained(root / name, dtype=torch.float32)
        tok.save(str(root / name / "tokenizer.json"))
        out.append(str(root / name))
    return out[0], out[1]


@pytest.fixture(scope="session")
def engine_options(tmp_path_factory) -> dict:
    if house_available():
        return {"model": "house:target", "draft": "house:draft", "device": "cpu"}
    target, draft = _tiny_pair(tmp_path_factory.mktemp("tiny-pair"))
    return {"model": target, "draft": draft, "device": "cpu"}


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER), scope="module")
async def lsp_server(lsp_client: LanguageClient, engine_options):
    """One server process per test module (starting one costs seconds: torch import, model load)."""
    await lsp_client.initialize_session(init_params(engine_options))
    await wait_engine_ready(lsp_client)
    yield
    await lsp_client.shutdown_session()


@pytest_asyncio.fixture(loop_scope="module")
async def client(lsp_server, engine_options):
    """The module's server, reset to the test settings (engine rebuilt only if a test changed it)."""
    lsp_server.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings=init_params(engine_options).initialization_options | TEST_DEFAULTS))
    await wait_engine_ready(lsp_server)
    lsp_server.messages.clear()
    return lsp_server


