"""Speculative decoding: proposers (n-gram prompt lookup, draft model), verification, adaptive k, the step."""

from .decode import StepResult, catch_up, common_prefix, decode_one, prefill, speculative_step
from .draft import DraftProposer
from .ngram import propose_ngram
from .sampling import Sampling
from .schedule import AdaptiveK, BreakEven, FixedK, make_schedule
from .verify import verify_greedy, verify_sampling

__all__ = ["AdaptiveK", "BreakEven", "DraftProposer", "FixedK", "Sampling", "StepResult", "catch_up", "common_prefix",
           "decode_one", "make_schedule", "prefill", "propose_ngram", "speculative_step", "verify_greedy", "verify_sampling"]
