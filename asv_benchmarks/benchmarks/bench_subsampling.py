"""One gradient-estimator call of each subsampling kind on logistic regression, N = 10^6, n = 1000.

``EstimatorCall.time_estimate`` times ``estimate(rng, state, position)`` for one chain at d = 10:
plain minibatches (without and with replacement), SGLD-PS and SGLD-CV-PS with their approximate
weights (alias-table draws), SGLD-CV, ASGLD-CV-PS with V_0 set so that n_t is about 1000, SVRG and
SAGA (whose N x d table is 80 MB here). The weights, the alias table, the centre's full gradient and
SAGA's table are built in ``setup`` (untimed; set-up takes tens of seconds at this N). k-DPP
subsampling cannot run at this N (an N x N kernel); ``DPPCall`` times it at N = 2000, k = 20.
"""

from __future__ import annotations

import numpy as np

from .common import BACKENDS, XPBenchmark, logistic_data, safe_import

with safe_import():
    from sgmc.backends import default_rng
    from sgmc.estimators import (
        SAGA,
        SVRG,
        AdaptiveControlVariatePS,
        ControlVariate,
        ControlVariatePS,
        DPPSubsampling,
        Minibatch,
        PreferentialSubsampling,
    )
    from sgmc.models import LogisticRegression

N_DATA = 1_000_000
BATCH = 1_000
DIM = 10
KINDS = ["minibatch", "minibatch-replace", "ps", "cv", "cv-ps", "adaptive-cv-ps", "svrg", "saga"]


def _build(kind, model, centre):
    if kind == "minibatch":
        return Minibatch(model, BATCH)
    if kind == "minibatch-replace":
        return Minibatch(model, BATCH, replace=True)
    if kind == "ps":
        return PreferentialSubsampling(model, BATCH, "approx", centre)
    if kind == "cv":
        return ControlVariate(model, BATCH, centre)
    if kind == "cv-ps":
        return ControlVariatePS(model, BATCH, "approx", centre)
    if kind == "svrg":
        return SVRG(model, BATCH)
    if kind == "saga":
        return SAGA(model, BATCH)
    est = AdaptiveControlVariatePS(model, BATCH, centre=centre, v0=1.0)
    return est


class EstimatorCall(XPBenchmark):
    """One estimator call for one chain at N = 10^6, n = 1000, d = 10."""

    param_names = ("backend", "kind")
    params = (BACKENDS, KINDS)
    timeout = 600

    def prepare(self, kind):
        X, y = logistic_data(N_DATA, DIM)
        self.model = LogisticRegression(self.asarray(X), self.asarray(y))
        r = np.random.default_rng(1)
        centre = self.asarray(r.standard_normal(DIM) / np.sqrt(DIM))
        self.estimator = _build(kind, self.model, centre)
        self.position = self.asarray((np.asarray(r.standard_normal(DIM)) * 0.01 + 0.0)[None, :])
        self.position = self.position + centre[None, :]
        if kind == "adaptive-cv-ps":
            # V_0 with n_t = 1000 at this position: coef ||theta - centre||^2 = 999.5
            est = self.estimator
            diff = self.position - centre[None, :]
            d2 = float(self.xp.sum(diff * diff))
            self.estimator = est.with_v0(est.v0 * est.coef * d2 / (BATCH - 0.5))
        self.rng = default_rng(0, backend=self.be)
        self.state = self.estimator.init(self.rng, self.position)

    def warm_up(self, backend, kind):
        self.time_estimate(backend, kind)

    def time_estimate(self, backend, kind):
        _, state, _ = self.estimator.estimate(self.rng, self.state, self.position)
        self.state = state
        self.sync()


class DPPCall(XPBenchmark):
    """One DPP-SGLD estimator call (a k-DPP draw of k = 20 and the gradient) at N = 2000."""

    params = (BACKENDS,)
    timeout = 600

    def prepare(self):
        X, y = logistic_data(2000, 4)
        self.model = LogisticRegression(self.asarray(X), self.asarray(y))
        self.estimator = DPPSubsampling(self.model, 20)
        self.rng = default_rng(0, backend=self.be)
        self.position = self.model.zeros(1)

    def warm_up(self, backend):
        self.time_estimate(backend)

    def time_estimate(self, backend):
        self.estimator.estimate(self.rng, None, self.position)
        self.sync()
