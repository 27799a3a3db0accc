"""posgeom_utils.probes against a brute force on a tiny random BERT. Chapter: *Positions layer by layer*."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from posgeom_utils.probes import LayerMeans, positional_hidden_means

N = 12


@pytest.fixture(scope="module")
def texts():
    rng = random.Random(0)
    words = (
        "the a cat dog sat on mat quickly running blue house river mountain under over "
        "because although extraordinary tokenization of and"
    ).split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 14))) for _ in range(20)]


def brute_force(model, tokenizer, texts, n):
    """Per-position means by explicit loops, one text at a time (no padding), and the mean hidden state over
    every token counted (the global centre), per layer."""
    sums, counts = None, np.zeros(n)
    token_sum, tokens = 0.0, 0
    with torch.no_grad():
        for text in texts:
            enc = tokenizer(text, truncation=True, max_length=n, return_tensors="pt")
            hs = model(**enc, output_hidden_states=True).hidden_states
            h = torch.stack(hs, 0)[:, 0].double().numpy()  # (layers + 1, L, d)
            if sums is None:
                sums = np.zeros((h.shape[0], n, h.shape[-1]))
            L = h.shape[1]
            for i in range(L):
                sums[:, i] += h[:, i]
                counts[i] += 1
                token_sum = token_sum + h[:, i]
                tokens += 1
    keep = counts > 0
    return (
        sums[:, keep] / counts[keep][None, :, None],
        counts[keep].astype(np.int64),
        token_sum / tokens,
    )


@pytest.mark.parametrize("n", [N, 64])  # 64: positions no text reaches are dropped
def test_matches_brute_force(tiny_bert, tokenizer, texts, n):
    result = positional_hidden_means(tiny_bert, tokenizer, texts, n, batch_size=4, device="cpu")
    expected, counts, _ = brute_force(tiny_bert, tokenizer, texts, n)
    assert isinstance(result, LayerMeans) and result.means.dtype == np.float64
    assert result.means.shape == (3, len(counts), 32) and (n == N) == (len(counts) == N)
    np.testing.assert_array_equal(result.counts, counts)
    np.testing.assert_allclose(result.means, expected, atol=1e-5, rtol=0)


def test_batch_size_does_not_change_result(tiny_bert, tokenizer, texts):
    results = [
        positional_hidden_means(tiny_bert, tokenizer, texts, N, batch_size=b, device="cpu")
        for b in (1, 3, 64)
    ]
    for r in results[1:]:
        np.testing.assert_array_equal(r.counts, results[0].counts)
        np.testing.assert_allclose(r.means, results[0].means, atol=1e-5, rtol=0)


def test_global_centre_subtracts_the_mean_over_all_tokens(tiny_bert, tokenizer, texts):
    """centre='global' against the brute force: position means minus the mean hidden state over all tokens."""
    centred = positional_hidden_means(
        tiny_bert, tokenizer, texts, N, batch_size=4, device="cpu", centre="global"
    )
    expected, counts, token_mean = brute_force(tiny_bert, tokenizer, texts, N)
    expected = expected - token_mean[:, None, :]
    assert centred.centre == "global"
    np.testing.assert_array_equal(centred.counts, counts)
    np.testing.assert_allclose(centred.means, expected, atol=1e-5, rtol=0)
    assert np.abs(token_mean).max() > 1e-2  # the centre is not trivially zero


def test_bad_inputs(tiny_bert, tokenizer, texts):
    with pytest.raises(
        ValueError, match=r"n must be an integer in \[1, 64\].*max_position_embeddings=64"
    ):
        positional_hidden_means(tiny_bert, tokenizer, texts, 65, device="cpu")
    with pytest.raises(ValueError, match="texts"):
        positional_hidden_means(tiny_bert, tokenizer, [], N, device="cpu")
    with pytest.raises(ValueError, match="batch_size"):
        positional_hidden_means(tiny_bert, tokenizer, texts, N, batch_size=0, device="cpu")
    with pytest.raises(ValueError, match="centre"):
        positional_hidden_means(tiny_bert, tokenizer, texts, N, centre="local", device="cpu")


class _NoHidden(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, **kwargs):
        out = self.inner(**kwargs)
        return SimpleNamespace(last_hidden_state=out.last_hidden_state, hidden_states=None)


def test_model_without_hidden_states(tiny_bert, tokenizer, texts):
    with pytest.raises(ValueError, match="hidden_states"):
        positional_hidden_means(_NoHidden(tiny_bert), tokenizer, texts, N, device="cpu")
