"""A remote client naming an EAGLE-3 drafter folder goes through the same model allowlist as model and draft
(vLLM loads the folder's weights)."""

from argparse import Namespace

import pytest

from lsp import security
from lsp.security import Policy


def test_drafter_outside_the_allowed_folders_is_refused():
    p = Policy(allow_client_models=False)
    ok = Namespace(model="house:target", draft="house:draft", drafter="house:eagle3")
    security.check_models(ok, p)
    bad = Namespace(model="house:target", draft="house:draft", drafter="/etc")
    with pytest.raises(security.SecurityError, match="drafter '/etc' is not allowed"):
        security.check_models(bad, p)
