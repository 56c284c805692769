"""Unit tests of the pure parts: n-gram lookup (table), verification, the adaptive schedule, sampling."""

import pytest
import torch

from completer.speculative import AdaptiveK, FixedK, Sampling, make_schedule, propose_ngram, verify_greedy, verify_sampling


# (tokens, k, ngram_min, ngram_max, expected) in the style of vLLM's ngram proposer tests
NGRAM_TABLE = [
    ([], 3, 2, 4, []),                                  # nothing to look up
    ([1], 3, 1, 4, []),
    ([1, 2, 3, 4], 3, 2, 4, []),                        # no repeat
    ([1, 2, 3, 1, 2], 3, 2, 4, [3, 1, 2]),              # suffix [1,2] seen at 0 -> what followed
    ([1, 2, 3, 1, 2], 1, 2, 4, [3]),                    # k caps the proposal
    ([1, 2, 3, 1, 2], 3, 3, 4, []),                     # [3,1,2] never seen before: n >= 3 finds nothing
    ([1, 2, 3, 1, 2, 3], 2, 2, 4, [1, 2]),              # longest match n=3 [1,2,3] at 0 -> [1,2]
    ([5, 1, 2, 9, 7, 1, 2, 8, 1, 2], 2, 2, 2, [8, 1]),  # most recent earlier occurrence wins (at 5, not 1)
    ([4, 1, 2, 9, 3, 1, 2, 8, 4, 1, 2], 2, 2, 3, [9, 3]),  # longer match [4,1,2] (n=3) beats the recent [1,2]
    ([7, 7, 7, 7], 3, 2, 4, [7]),                       # overlapping: [7,7,7] at 0 is followed by one 7
    ([1, 2, 1, 2, 1, 2], 4, 2, 2, [1, 2]),              # suffix [1,2] most recently at 2 -> [1,2]
    ([3, 1, 3, 2, 3], 2, 1, 1, [2, 3]),                 # unigram [3], most recent earlier at 2 -> [2,3]
]


@pytest.mark.parametrize("tokens,k,lo,hi,expected", NGRAM_TABLE)
def test_ngram_table(tokens, k, lo, hi, expected):
    assert propose_ngram(tokens, k, lo, hi) == expected


# FIM prompts: S = <|fim_suffix|>, M = <|fim_middle|>, P = <|fim_prefix|>, F = <|file_sep|> (ids 96-99).
# PSM: [F ctx.. P prefix.. S suffix.. M generated..]. (tokens, k, expected)
S, M, P, F = 98, 99, 97, 96
FIM_TABLE = [
    # the code after the cursor holds what is typed next: the generated [4,5] is found in the suffix
    ([P, 1, 2, 3, S, 4, 5, 6, 1, M, 4, 5], 3, [6, 1]),                  # proposal stops before M
    ([P, 1, 2, 3, S, 4, 5, 6, 1, 2, M, 4, 5], 2, [6, 1]),
    # a match in the context block (another file) before the prefix
    ([F, 4, 5, 6, F, P, 1, 2, S, 9, M, 4, 5], 3, [6]),                 # context: [4,5] -> [6, F]: cut at F
    ([F, 21, 22, 23, 24, F, P, 1, 2, S, 30, M, 21, 22], 2, [23, 24]),   # the other file's code continues
    # an occurrence followed by a sentinel is skipped for an older one that is followed by code
    ([P, 4, 5, 11, 12, S, 4, 5, M, 4, 5], 2, [11, 12]),                 # suffix's [4,5] ends at M: use prefix's
    # the n-gram at the end never spans a sentinel: just after prefill the last token is M
    ([P, 1, 2, S, 1, 2, M], 2, []),
    # SPM order (suffix first) is searched the same way
    ([S, 40, 41, 42, P, 1, 2, M, 40, 41], 3, [42]),                      # [42, P]: stops before P
]


@pytest.mark.parametrize("tokens,k,expected", FIM_TABLE)
def test_ngram_fim_table(tokens, k, expected):
    assert propose_ngram(tokens, k, 2, 4, sentinels={S, M, P, F}) == expected


def test_ngram_without_sentinels_reads_across_them():
    """What the lookup did before it knew FIM: it proposes the sentinel the target never writes mid-code."""
    assert propose_ngram([P, 1, 2, 3, S, 4, 5, 6, 1, M, 4, 5], 3) == [6, 1, M]


def test_ngram_bad_bounds():
    with pytest.raises(ValueError):
        propose_ngram([1, 2], 2, 3, 2)
    assert propose_ngram([1, 2, 1, 2], 0) == []


def one_hot_logits(ids, V=6, big=10.0):
    x = torch.zeros(len(ids), V)
    for i, t in enumerate(ids):
        x[i, t] = big
    return x


@pytest.mark.parametrize("draft,target,expected", [
    ([1, 2, 3], [1, 2, 3, 4], (3, 4)),      # all accepted -> bonus
    ([1, 2, 3], [1, 5, 3, 4], (1, 5)),      # first mismatch at 1 -> target's token there
    ([1, 2, 3], [0, 2, 3, 4], (0, 0)),
    ([], [2], (0, 2)),
])
def test_verify_greedy(draft, target, expected):
    assert verify_greedy(draft, one_hot_logits(target)) == expected


def test_verify_sampling_accepts_when_p_equals_q_and_rejects_impossible():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(3, 5, generator=g), -1)
    for _ in range(50):   # p == q: every draft token is accepted (ratio 1)
        assert verify_sampling([1, 2], p, p[:2], g)[0] == 2
    p0 = p.clone()
    p0[0, 4] = 0.0
    p0[0] /= p0[0].sum()
    for _ in range(50):   # p(x) = 0: always rejected, and the recovered token is never x
        a, tok = verify_sampling([4, 1], p0, None, g)
        assert a == 0 and tok != 4


def tv(a: torch.Tensor, b: torch.Tensor) -> float:
    return 0.5 * float((a - b).abs().sum())


@pytest.mark.parametrize("one_hot", [False, True])
def test_rejection_sampling_reproduces_target_distribution(one_hot):
    """Toy p/q over 6 tokens, k=2: the first emitted token follows p exactly (TV bound), and so does the pair."""
    V, N = 6, 40_000
    g = torch.Generator().manual_seed(1234)
    p = torch.tensor([[0.05, 0.4, 0.1, 0.25, 0.15, 0.05]] * 3)
    q = torch.tensor([[0.3, 0.1, 0.3, 0.05, 0.05, 0.2]] * 2)
    first = torch.zeros(V)
    naive = torch.zeros(V)
    for _ in range(N):
        if one_hot:
            draft = [int(torch.multinomial(q[0], 1, generator=g)), 2]
            a, tok = verify_sampling(draft, p, None, g)
        else:
            draft = [int(torch.multinomial(q[i], 1, generator=g)) for i in range(2)]
            a, tok = verify_sampling(draft, p, q, g)
        out = draft[:a] + [tok]
        first[out[0]] += 1
        naive[draft[0]] += 1
    first /= N
    naive /= N
    # the sampling error of 40k draws over 6 cells is ~0.005; q itself is 0.5 away
    assert tv(first, p[0]) < 0.015, (first, p[0])
    assert tv(naive, p[0]) > 0.3          # the test can fail: the draft's own distribution is far from p


def test_adaptive_schedule_grows_and_shrinks_within_bounds():
    s = AdaptiveK(max_k=5, start=2)
    for _ in range(10):
        s.update(s.k, s.k)            # fully accepted: grow to the bound
    assert s.k == 5
    s.update(5, 4)                    # one rejection shrinks by at least one
    assert s.k == 4
    s.update(4, 0)                    # rejected at the first token: back to 1
    assert s.k == 1
    s.update(1, 0)
    assert s.k == 1                   # never below 1
    s.update(0, 0)                    # no draft (n-gram found nothing): unchanged
    assert s.k == 1
    s.update(1, 1)
    assert s.k == 2


def test_fixed_schedule_and_factory():
    f = make_schedule(3)
    assert isinstance(f, FixedK) and f.k == 3
    f.update(3, 0)
    assert f.k == 3
    a = make_schedule("adaptive", 6)
    assert isinstance(a, AdaptiveK) and a.max_k == 6 and 1 <= a.k <= 6
    with pytest.raises(ValueError):
        FixedK(0)


def test_sampling_top_p_keeps_smallest_set():
    s = Sampling(temperature=1.0, top_p=0.7)
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    probs = s.probs(logits)
    assert torch.allclose(probs, torch.tensor([0.5, 0.3, 0.0, 0.0]) / 0.8, atol=1e-5)
    assert Sampling().sample(logits) == 0
