"""posgeom_utils.lazy: the linearised table flow starts linear in mu_i and ends at the moment-matching
fixed point. Chapter: *Are nearby positions encoded nearby?*."""

from __future__ import annotations

import numpy as np
import pytest

from posgeom_utils.lazy import linearised_table_flow


def instance(n=5, V=6, d=12, seed=0):
    rng = np.random.default_rng(seed)
    mu = rng.dirichlet(np.ones(V), size=n)
    return mu, rng.normal(size=(V, d)) / np.sqrt(d), rng.normal(size=V) * 0.3


def softmax(Z):
    E = np.exp(Z - Z.max(axis=1, keepdims=True))
    return E / E.sum(axis=1, keepdims=True)


def test_the_first_step_is_linear_in_mu():
    mu, J, z0 = instance()
    flow = linearised_table_flow(mu, J, z0, lr=0.1, steps=1, records=2)
    expected = -0.1 * (softmax(np.tile(z0, (len(mu), 1))) - mu) @ J
    np.testing.assert_allclose(flow.tables[0], expected, atol=1e-14)


def test_where_J_reaches_every_logit_the_flow_converges_to_mu():
    """d >= V: the fixed point matches every mu_i exactly, so the loss reaches its floor (the entropy)."""
    mu, J, z0 = instance()
    flow = linearised_table_flow(mu, J, z0, lr=1.0, steps=20000, records=5)
    assert flow.loss_gap[-1] < 1e-6 < flow.loss_gap[0]
    assert np.all(np.diff(flow.loss_gap) <= 1e-12)  # descent on a convex loss
    np.testing.assert_allclose(softmax(z0 + flow.tables[-1] @ J.T), mu, atol=1e-4)


def test_bad_input_names_the_parameter():
    mu, J, z0 = instance()
    with pytest.raises(ValueError, match="J must be V x d"):
        linearised_table_flow(mu, J[:-1], z0, lr=1.0, steps=2)
    with pytest.raises(ValueError, match="lr"):
        linearised_table_flow(mu, J, z0, lr=0.0, steps=2)
