"""Which replica serves a user's keystrokes: a stable hash of the client and the document.

Consecutive keystrokes in one document share all of their prompt but the last few tokens, so the replica that
served the previous keystroke holds that prefix in its KV cache (vLLM's automatic prefix caching); a request sent to
another replica prefills the whole prompt again. Two ways to keep a user on one replica:

- ``X-data-parallel-rank``: vLLM's OpenAI server with ``--data-parallel-size N`` (one endpoint, N engines) routes a
  request that carries this header to that rank (``vllm/entrypoints/openai``: the header's value is the
  ``data_parallel_rank`` of the request); sent when the editor side is configured with ``replicas=N``.
- a session header (``X-Session-Id``, the same hash as hex): a router in front of separate servers hashes on it
  (``vllm-router --policy consistent_hash`` reads ``X-Session-Id``, vLLM production-stack's router ``--routing-logic
  session --session-key x-session-id``), so the rank is the router's choice and survives a replica's death.

Pure functions: the hash is SHA-256, not Python's ``hash()`` (salted per process), so every editor process of a
user picks the same replica.
"""

from __future__ import annotations

import getpass
import hashlib
import socket

RANK_HEADER = "X-data-parallel-rank"
SESSION_HEADER = "X-Session-Id"


def default_client_id() -> str:
    """``user@host`` of this process: the same for every editor window of one user on one machine."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 -- no user name in this environment (a container without passwd entry)
        user = "user"
    return f"{user}@{socket.gethostname()}"


def session_key(client_id: str, document: str | None) -> str:
    """A stable hex key for (client, document): 16 hex digits of SHA-256."""
    return hashlib.sha256(f"{client_id}\0{document or ''}".encode()).hexdigest()[:16]


def rank_for(client_id: str, document: str | None, replicas: int) -> int:
    """The data-parallel rank (0..replicas-1) for (client, document)."""
    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {replicas}")
    return int(session_key(client_id, document), 16) % replicas


def headers_for(client_id: str, document: str | None, replicas: int) -> dict[str, str]:
    """The affinity headers of one request: the session header always, the rank header with ``replicas`` >= 1."""
    h = {SESSION_HEADER: session_key(client_id, document)}
    if replicas >= 1:
        h[RANK_HEADER] = str(rank_for(client_id, document, replicas))
    return h
