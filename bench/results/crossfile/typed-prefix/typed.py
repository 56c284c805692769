"""Diagnostic (not shipped): bench.quality --crossfile with import definitions whose name starts with the identifier
being typed at the cursor put first (rank -1), on top of rank_by_use."""
import re, sys
sys.path.insert(0, ".")     # run from the repository root
import completer.training.crossfile as xf
from completer.context.plan import Snippet
orig = xf.project_snippets
def patched(root, path, document, offset, language, sources, workspaces):
    out = orig(root, path, document, offset, language, sources, workspaces)
    m = re.search(r"[A-Za-z_]\w*$", document[:offset])
    typed = m.group(0) if m else ""
    if len(typed) < 2:
        return out
    return [Snippet(s.source, s.kind, s.lines, s.names, rank=-1, score=s.score)
            if s.kind == "import" and len(s.names) == 1 and s.names[0].startswith(typed) and s.names[0] != typed else s
            for s in out]
xf.project_snippets = patched
from bench import quality
sys.exit(quality.main(sys.argv[1:]))
