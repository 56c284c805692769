"""What a start loads: building a model from its folder must not pull in torch's compiler stack (torch._dynamo,
sympy), which cost 2-11 s of every engine start on 2 cores (issue 29). Checked in a fresh interpreter."""

import subprocess
import sys

CODE = """
import sys, torch
from completer.models import resolve_model
from completer.models.llama import LlamaForCausalLM
m = LlamaForCausalLM.from_pretrained(resolve_model("house:v2/draft"))
assert not any(p.is_meta for p in m.parameters()) and not any(b.is_meta for b in m.buffers())
print(sorted(x for x in ("torch._dynamo", "sympy") if x in sys.modules))
"""


def test_from_pretrained_imports_no_compiler_stack():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
