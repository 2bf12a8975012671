"""Scaling laws: the loss surface L(Ψ, D), its compute optimum, Chinchilla's fitted frontiers,
over-training for inference, capability thresholds, and the fits that measure exponents.

Chapter 07 derives the optimum. Take the parametric loss of Hoffmann et al. (2022)

    L(Ψ, D) = E + A / Ψ^α + B / D^β

(Ψ parameters, D training tokens; the paper writes N for Ψ) and minimise it on the
iso-compute curve C = 6ΨD (:func:`dtbook.flops.training_flops`). A Lagrange multiplier
gives the balance condition α·A/Ψ^α = β·B/D^β and the closed form

    Ψ* = G (C/6)^a,   D* = G⁻¹ (C/6)^b,   G = (αA / (βB))^(1/(α+β)),
    a = β/(α+β),      b = α/(α+β),

so the exponents a and b follow from α and β: with the paper's α = 0.34, β = 0.28 they are
a = 0.452 and b = 0.548, not the 0.50 and 0.50 the paper's other two approaches measured.
Chapter 08 compares the paper's three approaches (:func:`chinchilla_optimal`) and adds
inference to the bill (:func:`inference_aware_optimal`). Chapter 09 turns loss into
capability (:func:`capability`) and tests scaling curves for a break
(:func:`fit_broken_power_law`, :func:`break_evidence`).

The closed forms are plain arithmetic: numbers, NumPy arrays and SymPy symbols all work
(pass :func:`symbolic_law` as ``law`` to get the algebra). The fits and the numerical optima
take numbers and arrays. Losses are in nats per token; compute in FLOP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import sympy as sp

from . import _validate as check
from .symbolic import is_symbolic
from . import flops

__all__ = [
    "LossLaw", "CHINCHILLA", "BESIROGLU", "symbolic_law",
    "loss", "tokens_for_compute", "optimal_exponents", "frontier_coefficient",
    "compute_optimal", "optimal_ratio", "optimal_loss", "iso_loss_tokens", "iso_loss_asymptotes",
    "compute_optimal_for_loss", "rule_of_thumb",
    "HOFFMANN_TABLE_3", "HOFFMANN_TABLE_A3_APPROACH_2", "HOFFMANN_TABLE_A3_APPROACH_3",
    "CHINCHILLA_METHODS", "chinchilla_frontier", "chinchilla_optimal",
    "lifetime_flops", "inference_aware_optimal",
    "capability", "loss_gap", "emergence_params",
    "PowerLawFit", "BrokenPowerLawFit", "fit_power_law", "fit_broken_power_law",
    "information_criterion", "break_evidence", "isoflop_minimum",
]

_K = flops.TRAINING_PER_PARAM_TOKEN  # the 6 of C = 6ΨD, from dtbook.flops


# --- the law and its constants ----------------------------------------------------------------

@dataclass(frozen=True)
class LossLaw:
    """The constants of L(Ψ, D) = E + A/Ψ^α + B/D^β and where they come from (chapter 07).

    ``E`` is the irreducible loss (the entropy of the data, L∞ in the book's notation), ``A``
    and ``alpha`` the model-size term, ``B`` and ``beta`` the data term. Fields may be SymPy
    symbols (:func:`symbolic_law`).
    """

    E: object
    A: object
    B: object
    alpha: object
    beta: object
    source: str = field(default="", compare=False)

    def __post_init__(self):
        check.nonnegative("E", self.E)
        for name in ("A", "B", "alpha", "beta"):
            check.positive(name, getattr(self, name))

    def loss(self, params, tokens):
        """L(Ψ, D) under this law; see :func:`loss`."""
        return loss(params, tokens, self)

    def compute_optimal(self, compute):
        """(Ψ*, D*) for ``compute`` FLOP under this law; see :func:`compute_optimal`."""
        return compute_optimal(compute, self)


#: Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models" (arXiv:2203.15556),
#: Appendix D.2: the fitted L(N, D) = 1.69 + 406.4/N^0.34 + 410.7/D^0.28 of their Approach 3,
#: as printed (rounded) in the paper. Through the closed form of their Sec. 3.3 (eq. 4) it gives
#: a = 0.452 (Table 2 lists 0.46, from the unrounded fit).
CHINCHILLA = LossLaw(
    E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28,
    source="Hoffmann et al. 2022 (arXiv:2203.15556), Appendix D.2, the fitted parametric loss "
           "of Approach 3 as printed: E = 1.69, A = 406.4, B = 410.7, α = 0.34, β = 0.28")

#: Besiroglu, Erdil, Barnett and You 2024, "Chinchilla Scaling: A replication attempt"
#: (arXiv:2404.10102): Approach 3 refitted to data reconstructed from Hoffmann et al.'s
#: Figure 4. Its exponents give a = β/(α+β) = 0.513, in line with Approaches 1 and 2 and with
#: about 20 tokens per parameter.
BESIROGLU = LossLaw(
    E=1.8172, A=482.01, B=2085.43, alpha=0.3478, beta=0.3658,
    source="Besiroglu et al. 2024 (arXiv:2404.10102), the replication's refit of Approach 3: "
           "E = 1.8172, A = 482.01, B = 2085.43, α = 0.3478, β = 0.3658")


def symbolic_law() -> LossLaw:
    """The law with SymPy symbols E, A, B, α, β (positive) for derivations (chapter 07)."""
    E, A, B = sp.symbols("E A B", positive=True)
    alpha, beta = sp.symbols("alpha beta", positive=True)
    return LossLaw(E, A, B, alpha, beta, source="symbolic")


def _is_sym(*xs) -> bool:
    return any(isinstance(x, sp.Basic) for x in xs)


def _exp(x):
    return sp.exp(x) if _is_sym(x) else np.exp(x)


def _log(x):
    return sp.log(x) if _is_sym(x) else np.log(x)


def _sqrt(x):
    return sp.sqrt(x) if _is_sym(x) else np.sqrt(x)


def loss(params, tokens, law: LossLaw = CHINCHILLA):
    """The parametric loss L(Ψ, D) = E + A/Ψ^α + B/D^β in nats per token (chapter 07).

    ``loss(70e9, 1.4e12)`` is Chinchilla's predicted loss, 1.94 nats. Numbers, arrays or
    SymPy symbols.
    """
    check.positive("params", params)
    check.positive("tokens", tokens)
    return law.E + law.A / params**law.alpha + law.B / tokens**law.beta


def tokens_for_compute(compute, params):
    """Tokens D = C/(6Ψ) that a budget of ``compute`` FLOP buys a model of Ψ parameters: the
    iso-compute hyperbola (chapter 07)."""
    check.positive("compute", compute)
    check.positive("params", params)
    return compute / flops.training_flops(params, 1)


def optimal_exponents(law: LossLaw = CHINCHILLA):
    """(a, b) with Ψ* ∝ C^a and D* ∝ C^b: a = β/(α+β), b = α/(α+β) (chapter 07). They add
    to 1 because Ψ*·D* = C/6."""
    s = law.alpha + law.beta
    return law.beta / s, law.alpha / s


def frontier_coefficient(law: LossLaw = CHINCHILLA):
    """G = (αA / (βB))^(1/(α+β)), the coefficient of the compute-optimal frontier
    (chapter 07; Hoffmann et al. 2022, eq. 4)."""
    return (law.alpha * law.A / (law.beta * law.B)) ** (1 / (law.alpha + law.beta))


def compute_optimal(compute, law: LossLaw = CHINCHILLA):
    """(Ψ*, D*) minimising L(Ψ, D) subject to 6ΨD = ``compute`` (chapter 07).

    Ψ* = G (C/6)^a and D* = G⁻¹ (C/6)^b (:func:`optimal_exponents`,
    :func:`frontier_coefficient`), derived with a Lagrange multiplier in chapter 07. The
    irreducible E does not move the optimum. ``compute_optimal(1e24)`` is 41B parameters on
    4.0T tokens under :data:`CHINCHILLA` (98 tokens per parameter: the printed constants
    favour small models, see chapter 08).
    """
    check.positive("compute", compute)
    a, b = optimal_exponents(law)
    g = frontier_coefficient(law)
    c6 = compute / _K
    return g * c6**a, c6**b / g


def optimal_ratio(compute, law: LossLaw = CHINCHILLA):
    """Tokens per parameter at the optimum, D*/Ψ* = G⁻² (C/6)^((α−β)/(α+β)) (chapter 07).

    It depends on the budget unless α = β: under :data:`CHINCHILLA` it grows as C^0.097.
    """
    check.positive("compute", compute)
    a, b = optimal_exponents(law)
    return (compute / _K) ** (b - a) / frontier_coefficient(law) ** 2


def optimal_loss(compute, law: LossLaw = CHINCHILLA):
    """The lowest loss a budget of ``compute`` FLOP can buy: L(Ψ*, D*) (chapter 07)."""
    return loss(*compute_optimal(compute, law), law)


def iso_loss_tokens(params, target_loss, law: LossLaw = CHINCHILLA):
    """Tokens D that bring a model of Ψ parameters to ``target_loss``: the iso-loss curve
    D = (B / (L − E − A/Ψ^α))^(1/β) (chapter 07).

    Numerically, where Ψ is too small to ever reach the target (A/Ψ^α ≥ L − E), the answer
    is ``inf``.
    """
    check.positive("params", params)
    check.positive("target_loss", target_loss)
    room = target_loss - law.E - law.A / params**law.alpha
    if _is_sym(room):
        return (law.B / room) ** (1 / law.beta)
    room = np.asarray(room, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.where(room > 0, (law.B / np.where(room > 0, room, 1.0)) ** (1 / law.beta), np.inf)
    return d if d.ndim else float(d)


def iso_loss_asymptotes(target_loss, law: LossLaw = CHINCHILLA):
    """(Ψ_min, D_min): the iso-loss curve for ``target_loss`` needs Ψ > (A/(L−E))^(1/α) and
    D > (B/(L−E))^(1/β), however much of the other one there is (chapter 07)."""
    check.positive("target_loss", target_loss)
    room = target_loss - law.E
    if not _is_sym(room) and not np.all(np.asarray(room) > 0):
        raise ValueError(f"target_loss must exceed the irreducible loss E = {law.E}, got {target_loss!r}")
    return (law.A / room) ** (1 / law.alpha), (law.B / room) ** (1 / law.beta)


def compute_optimal_for_loss(target_loss, law: LossLaw = CHINCHILLA):
    """(Ψ, D) that reach ``target_loss`` with the least training compute (chapter 08).

    The iso-loss curve touches the lowest iso-compute hyperbola where αA/Ψ^α = βB/D^β, the
    same balance as :func:`compute_optimal`: of the reducible loss L − E, the model term takes
    β/(α+β) and the data term α/(α+β).
    """
    check.positive("target_loss", target_loss)
    room = target_loss - law.E
    if not _is_sym(room) and not np.all(np.asarray(room) > 0):
        raise ValueError(f"target_loss must exceed the irreducible loss E = {law.E}, got {target_loss!r}")
    s = law.alpha + law.beta
    model_term, data_term = room * law.beta / s, room * law.alpha / s
    return (law.A / model_term) ** (1 / law.alpha), (law.B / data_term) ** (1 / law.beta)


def rule_of_thumb(compute, tokens_per_param=20):
    """(Ψ, D) with D = r·Ψ and 6ΨD = C: Ψ = √(C / 6r), D = rΨ (chapter 07).

    With r = 20, the rounded Chinchilla ratio, Ψ = √(C/120).
    """
    check.positive("compute", compute)
    check.positive("tokens_per_param", tokens_per_param)
    psi = _sqrt(compute / flops.training_flops(1, tokens_per_param))
    return psi, tokens_per_param * psi


# --- Chinchilla's three approaches -------------------------------------------------------------

#: Hoffmann et al. 2022, Table 3: Approach 1's compute-optimal (parameters, FLOPs, tokens).
HOFFMANN_TABLE_3 = (
    (400e6, 1.92e19, 8.0e9), (1e9, 1.21e20, 20.2e9), (10e9, 1.23e22, 205.1e9),
    (67e9, 5.76e23, 1.5e12), (175e9, 3.85e24, 3.7e12), (280e9, 9.90e24, 5.9e12),
    (520e9, 3.43e25, 11.0e12), (1e12, 1.27e26, 21.2e12), (10e12, 1.30e28, 216.2e12),
)

#: Hoffmann et al. 2022, Table A3 (Appendix D.3): Approach 2 (IsoFLOP profiles),
#: (parameters, FLOPs, tokens).
HOFFMANN_TABLE_A3_APPROACH_2 = (
    (400e6, 1.84e19, 7.7e9), (1e9, 1.20e20, 20.0e9), (10e9, 1.32e22, 219.5e9),
    (67e9, 6.88e23, 1.7e12), (175e9, 4.54e24, 4.3e12), (280e9, 1.18e25, 7.1e12),
    (520e9, 4.19e25, 13.4e12), (1e12, 1.59e26, 26.5e12), (10e12, 1.75e28, 292.0e12),
)

#: Hoffmann et al. 2022, Table A3: Approach 3 (parametric fit), (parameters, FLOPs, tokens).
#: The 175B row is printed as 1.26e+24 FLOPs, a typo: 6 × 175e9 × 12.0e12 = 1.26e25, which is
#: the value kept here.
HOFFMANN_TABLE_A3_APPROACH_3 = (
    (400e6, 2.21e19, 9.2e9), (1e9, 1.62e20, 27.1e9), (10e9, 2.46e22, 410.1e9),
    (67e9, 1.71e24, 4.1e12), (175e9, 1.26e25, 12.0e12), (280e9, 3.52e25, 20.1e12),
    (520e9, 1.36e26, 43.5e12), (1e12, 5.65e26, 94.1e12), (10e12, 8.55e28, 1425.5e12),
)

#: The methods :func:`chinchilla_optimal` knows, and what each one is.
CHINCHILLA_METHODS = {
    "approach1": "Approach 1 (minimum over training curves): a power law fitted to Table 3",
    "approach2": "Approach 2 (IsoFLOP profiles): a power law fitted to Table A3",
    "approach3": "Approach 3 (parametric loss), the closed form with the printed constants (CHINCHILLA)",
    "besiroglu": "Approach 3 as refitted by Besiroglu et al. 2024 (BESIROGLU), closed form",
    "20x": "the rule of thumb D = 20Ψ",
}

_TABLES = {"approach1": HOFFMANN_TABLE_3, "approach2": HOFFMANN_TABLE_A3_APPROACH_2}
_FRONTIERS: dict = {}


def chinchilla_frontier(method: str = "approach1") -> "PowerLawFit":
    """Ψ*(C) = coef · C^exponent for one of Hoffmann et al.'s approaches (chapter 08).

    ``"approach1"`` and ``"approach2"`` fit a power law (least squares in log space) to the
    projections the paper tabulates (:data:`HOFFMANN_TABLE_3`,
    :data:`HOFFMANN_TABLE_A3_APPROACH_2`): the paper publishes their exponents (Table 2: 0.50
    and 0.49) but not their coefficients, and the tables carry both. ``"approach3"`` and
    ``"besiroglu"`` are the closed form G·(C/6)^a of :data:`CHINCHILLA` and
    :data:`BESIROGLU`. ``"20x"`` is √(C/120).
    """
    if method not in CHINCHILLA_METHODS:
        raise ValueError(f"method must be one of {sorted(CHINCHILLA_METHODS)}, got {method!r}")
    if method not in _FRONTIERS:
        if method in _TABLES:
            rows = np.array(_TABLES[method])
            fit = fit_power_law(rows[:, 1], rows[:, 0])
        elif method == "20x":
            fit = PowerLawFit(coef=flops.training_flops(1, 20) ** -0.5, exponent=0.5)
        else:
            law = CHINCHILLA if method == "approach3" else BESIROGLU
            a, _ = optimal_exponents(law)
            fit = PowerLawFit(coef=frontier_coefficient(law) * _K ** -a, exponent=a)
        _FRONTIERS[method] = fit
    return _FRONTIERS[method]


def chinchilla_optimal(compute, method: str = "approach1"):
    """(Ψ*, D*) for a budget of ``compute`` FLOP by one of Chinchilla's approaches
    (chapter 08); D* = C/(6Ψ*), so every answer spends exactly the budget.

    ``method`` is a key of :data:`CHINCHILLA_METHODS`. At 10²¹ FLOP Approach 1 gives 2.9B
    parameters (the paper's Appendix D.4 trains the 2.86B it predicts there) on 58B tokens.
    """
    check.positive("compute", compute)
    psi = chinchilla_frontier(method)(compute)
    return psi, tokens_for_compute(compute, psi)


# --- inference ----------------------------------------------------------------------------------

def lifetime_flops(params, tokens, inference_tokens):
    """Training plus serving compute: 6ΨD + 2Ψ·D_inf (chapter 08).

    Training costs :func:`dtbook.flops.training_flops`; each served token costs one forward
    pass, :func:`dtbook.flops.forward_flops` (2Ψ per token; attention and the prompt-cache
    economics of real serving are left out).
    """
    check.nonnegative("params", params)
    check.nonnegative("tokens", tokens)
    check.nonnegative("inference_tokens", inference_tokens)
    return flops.training_flops(params, tokens) + flops.forward_flops(params, inference_tokens)


def inference_aware_optimal(target_loss, inference_tokens, law: LossLaw = CHINCHILLA,
                            tol: float = 1e-12):
    """(Ψ, D) that reach ``target_loss`` with the least lifetime compute, training plus
    serving ``inference_tokens`` tokens (chapter 08; the question of Sardana et al. 2024,
    "Beyond Chinchilla-Optimal", arXiv:2401.00448).

    On the iso-loss curve D(Ψ), d/dΨ [6ΨD + 2ΨD_inf] = 0 gives
    6D·(αx/(βy) − 1) = 2D_inf with x = A/Ψ^α and y = L − E − x, solved by bisection in log Ψ.
    With no inference it is :func:`compute_optimal_for_loss`; any inference makes the model
    smaller and trains it on more tokens. Numbers only.
    """
    check.positive("target_loss", target_loss)
    check.nonnegative("inference_tokens", inference_tokens)
    check.scalar("target_loss", target_loss)  # a bisection for one point
    check.scalar("inference_tokens", inference_tokens)
    target_loss = float(target_loss)
    psi_hi, _ = compute_optimal_for_loss(target_loss, law)  # raises when the loss is unreachable
    if inference_tokens == 0:
        return compute_optimal_for_loss(target_loss, law)
    room = target_loss - law.E
    psi_min = (law.A / room) ** (1 / law.alpha)

    def g(log_psi):
        x = law.A * math.exp(-law.alpha * log_psi)
        y = room - x
        d = (law.B / y) ** (1 / law.beta)
        return 6 * d * (law.alpha * x / (law.beta * y) - 1) - 2 * inference_tokens

    lo, hi = math.log(psi_min), math.log(psi_hi)  # g > 0 just above psi_min, g(hi) = -2 D_inf
    lo_ok = lo + 1e-12 * max(1.0, abs(lo))
    while g(lo_ok) <= 0:  # pragma: no cover - only for extreme inputs
        lo_ok = (lo_ok + hi) / 2
    lo = lo_ok
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if g(mid) > 0:
            lo = mid
        else:
            hi = mid
    psi = math.exp((lo + hi) / 2)
    return psi, iso_loss_tokens(psi, target_loss, law)


# --- from loss to capability (chapter 09) -------------------------------------------------------

def capability(loss_value, threshold, tau):
    """Probability that a model of loss L shows a capability: σ((L_c − L)/τ)
    = 1 / (1 + e^{−(L_c − L)/τ}) (chapter 09).

    ``threshold`` L_c is the loss at which the capability is half there; ``tau`` τ its
    sharpness, in nats. As τ → 0 the curve becomes a step, and a smooth fall in loss shows up
    as a sudden jump in capability.
    """
    check.nonnegative("loss_value", loss_value)  # a cross-entropy: never below 0
    check.nonnegative("threshold", threshold)
    check.positive("tau", tau)
    return 1 / (1 + _exp(-(threshold - loss_value) / tau))


def loss_gap(probability, tau):
    """L_c − L = τ ln(p / (1 − p)), the inverse of :func:`capability` (chapter 09).

    A model that shows the capability with probability 5% sits τ ln 19 above the threshold.
    """
    check.fraction("probability", probability)
    check.positive("tau", tau)
    if not is_symbolic(probability) and np.any(np.asarray(probability, dtype=float) >= 1):
        raise ValueError(f"probability must be below 1 (certainty lies infinitely far below "
                         f"the threshold), got {probability!r}")
    return tau * _log(probability / (1 - probability))


def emergence_params(threshold, law: LossLaw = CHINCHILLA):
    """Parameters at which the model term alone reaches a threshold loss:
    Ψ_c = (A / (L_c − E))^(1/α) (chapter 09). This is the infinite-data limit: with finite
    data the data term adds to the loss and Ψ_c only grows."""
    check.positive("threshold", threshold)
    try:
        return iso_loss_asymptotes(threshold, law)[0]
    except ValueError as e:  # said of its target_loss: here that is the threshold
        raise ValueError(str(e).replace("target_loss", "threshold")) from None


# --- fitting ------------------------------------------------------------------------------------

def _as_xy(x, y, at_least=3):
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"x and y must be 1-d arrays of the same length, got shapes {x.shape} and {y.shape}")
    if len(x) < at_least:
        raise ValueError(f"need at least {at_least} points, got {len(x)}")
    check.positive("x", x)
    check.positive("y", y)
    return x, y


def information_criterion(rss, n, k, kind: str = "bic", noise=None):
    """BIC = n ln(RSS/n) + k ln n, or AIC = n ln(RSS/n) + 2k, for a least-squares fit of
    ``k`` parameters to ``n`` points with Gaussian residuals (chapter 09). Lower is better;
    the penalty is what keeps a model with more parameters from winning just by having them.

    With ``noise`` (the standard deviation of a residual, known from repeated measurements)
    the fit term is χ² = RSS/noise² instead of n ln(RSS/n). The default estimates the noise
    from the residuals themselves, so on a smooth curve measured very precisely any small
    systematic misfit looks significant; a measured noise level avoids that.
    """
    check.nonnegative("rss", rss)  # a sum of squares: a negative one is a mistake
    check.positive("n", n)
    check.nonnegative("k", k)
    for name, value in (("rss", rss), ("n", n), ("k", k), ("noise", noise)):
        check.scalar(name, value)  # one fit's score
    if kind not in ("bic", "aic"):
        raise ValueError(f"kind must be 'bic' or 'aic', got {kind!r}")
    if noise is None:
        fit_term = n * math.log(max(float(rss), 1e-300) / n)
    else:
        check.positive("noise", noise)
        fit_term = float(rss) / float(noise) ** 2
    return fit_term + (k * math.log(n) if kind == "bic" else 2 * k)


class _Scored:
    """BIC and AIC for a fit that has ``rss``, ``n`` and ``k`` fields (chapter 09)."""

    @property
    def bic(self) -> float:
        return information_criterion(self.rss, self.n, self.k, "bic")

    @property
    def aic(self) -> float:
        return information_criterion(self.rss, self.n, self.k, "aic")


@dataclass(frozen=True)
class PowerLawFit(_Scored):
    """y = offset + coef · x^exponent (chapters 07-09).

    ``rss`` is the residual sum of squares of log y, ``r2`` the fraction of the variance of
    log y explained, ``n`` the number of points and ``k`` the number of fitted parameters.
    A decaying law has a negative exponent.
    """

    coef: float
    exponent: float
    offset: float = 0.0
    rss: float = 0.0
    r2: float = 1.0
    n: int = 0
    k: int = 2

    def __call__(self, x):
        if not _is_sym(x):
            x = np.asarray(x, dtype=float)
        return self.offset + self.coef * x**self.exponent


def _r2(rss, logy):
    tss = float(((logy - logy.mean()) ** 2).sum())
    return 1.0 - rss / tss if tss > 0 else 1.0


def _levenberg_marquardt(residual, p0, iters=200):
    """Minimise Σ residual(p)² from p0 (finite-difference Jacobian). Small and deterministic."""
    p = np.asarray(p0, dtype=float)
    r = residual(p)
    cost, lam = float(r @ r), 1e-3
    for _ in range(iters):
        h = 1e-7 * np.maximum(1.0, np.abs(p))
        jac = np.stack([(residual(p + h[i] * np.eye(len(p))[i]) - r) / h[i] for i in range(len(p))], 1)
        jtj, jtr = jac.T @ jac, jac.T @ r
        improved = False
        for _ in range(30):
            step = np.linalg.solve(jtj + lam * np.diag(np.diag(jtj) + 1e-12), -jtr)
            trial = p + step
            rt = residual(trial)
            if np.all(np.isfinite(rt)) and float(rt @ rt) < cost:
                p, r, cost, lam, improved = trial, rt, float(rt @ rt), max(lam / 10, 1e-12), True
                break
            lam *= 10
        if not improved or np.max(np.abs(step)) < 1e-12 * (1 + np.max(np.abs(p))):
            break
    return p, cost


def fit_power_law(x, y, offset: bool = False) -> PowerLawFit:
    """Fit y = coef · x^exponent, or y = offset + coef · x^exponent (chapter 07).

    Without an offset this is ordinary least squares of log y on log x. With ``offset=True``
    the offset (E, the irreducible loss, for a loss curve) is fitted too, minimising the
    squared error of log y; the offset is kept between 0 and min(y). Fitting in log space
    weighs every point by its relative error, so a curve spanning decades is fitted evenly.
    """
    x, y = _as_xy(x, y, 4 if offset else 2)
    u, v = np.log(x), np.log(y)
    if not offset:
        slope, intercept = np.polyfit(u, v, 1)
        rss = float(((v - intercept - slope * u) ** 2).sum())
        return PowerLawFit(math.exp(intercept), float(slope), 0.0, rss, _r2(rss, v), len(x), 2)

    ymin = float(y.min())

    def residual(p):  # p = (log coef, exponent, offset as a fraction of min y, logit-squashed)
        e = ymin / (1 + math.exp(-p[2]))
        return np.log(e + np.exp(p[0] + p[1] * u)) - v

    best = None
    for frac in np.linspace(0.0, 0.99, 100):  # profile over the offset, then polish all three
        e = frac * ymin
        s, c = np.polyfit(u, np.log(y - e), 1)
        p = np.array([c, s, math.log(max(frac, 1e-6) / max(1 - frac, 1e-6))])
        cost = float((residual(p) ** 2).sum())
        if best is None or cost < best[1]:
            best = (p, cost)
    p, rss = _levenberg_marquardt(residual, best[0])
    e = ymin / (1 + math.exp(-p[2]))
    return PowerLawFit(math.exp(p[0]), float(p[1]), e, rss, _r2(rss, v), len(x), 3)


@dataclass(frozen=True)
class BrokenPowerLawFit(_Scored):
    """A power law whose exponent changes at ``break_x`` (chapter 09):
    y = coef · (x/break_x)^exponents[0] below the break and coef · (x/break_x)^exponents[1]
    above it, continuous at the break (a straight line with one kink in log-log axes).
    ``rss`` is in log y, as for :class:`PowerLawFit`; ``k`` = 4 fitted parameters."""

    coef: float
    exponents: tuple
    break_x: float
    rss: float = 0.0
    r2: float = 1.0
    n: int = 0
    k: int = 4

    def __call__(self, x):
        t = np.log(np.asarray(x, dtype=float) / self.break_x)
        return self.coef * np.exp(np.where(t < 0, self.exponents[0], self.exponents[1]) * t)


def _kinked_line(u, v):
    """Best kinked line through (u, v): (rss, log coef, exponents, log break)."""

    def solve(ub):
        basis = np.stack([np.ones_like(u), np.minimum(u - ub, 0), np.maximum(u - ub, 0)], 1)
        coef, *_ = np.linalg.lstsq(basis, v, rcond=None)
        return float(((v - basis @ coef) ** 2).sum()), coef

    grid = np.linspace(u[1], u[-2], 201)
    costs = [solve(g)[0] for g in grid]
    i = int(np.argmin(costs))
    a, b = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    phi = (math.sqrt(5) - 1) / 2
    for _ in range(60):  # golden section on the bracket around the best grid point
        c, d = b - phi * (b - a), a + phi * (b - a)
        if solve(c)[0] < solve(d)[0]:
            b = d
        else:
            a = c
    ub = (a + b) / 2
    rss, coef = solve(ub)
    if costs[i] < rss:
        ub = grid[i]
        rss, coef = solve(ub)
    return rss, coef[0], (float(coef[1]), float(coef[2])), ub


def fit_broken_power_law(x, y) -> BrokenPowerLawFit:
    """Least-squares fit of a broken power law to (x, y) in log-log space (chapter 09).

    For a given break the model is linear in (log coef, exponent below, exponent above), so
    the break is found by a scan over log x between the second and the second-to-last point
    (at least two points on each side), refined by golden-section search. Caballero et al.
    (2023) fit a smoothly broken version; the sharp kink here has one parameter fewer and
    answers the same question: did the exponent change?
    """
    x, y = _as_xy(x, y, 5)
    order = np.argsort(x)
    x, y = x[order], y[order]
    u, v = np.log(x), np.log(y)
    rss, logc, exps, ub = _kinked_line(u, v)
    return BrokenPowerLawFit(math.exp(logc), exps, math.exp(ub), rss, _r2(rss, v), len(x), 4)


def break_evidence(x, y, kind: str = "bic", noise=None):
    """(single, broken, Δ): a power law and a broken power law fitted to the same points, and
    Δ = IC(single) − IC(broken) (chapter 09). ``noise`` is the standard deviation of log y
    at each point, when repeated runs have measured it (see :func:`information_criterion`).

    Δ > 0 favours the break. On the BIC scale of Kass and Raftery (1995), Δ above 6 is strong
    evidence and above 10 very strong; a negative Δ says the extra two parameters did not
    earn their keep.
    """
    single, broken = fit_power_law(x, y), fit_broken_power_law(x, y)
    delta = (information_criterion(single.rss, single.n, single.k, kind, noise)
             - information_criterion(broken.rss, broken.n, broken.k, kind, noise))
    return single, broken, delta


def isoflop_minimum(params, losses):
    """The loss-minimising size on one IsoFLOP profile: fit L = c₀ + c₁ log Ψ + c₂ (log Ψ)²
    and return exp(−c₁ / 2c₂) (chapter 08; Chinchilla's Approach 2 fits the same parabola).

    ``losses`` may be any finite numbers (the log of the reducible loss works too). Raises
    ``ValueError`` when the parabola opens downwards (no valley in the data).
    """
    x, _ = _as_xy(params, np.ones(np.shape(params)), 3)
    y = np.asarray(losses, dtype=float)
    if y.shape != x.shape or not np.all(np.isfinite(y)):
        raise ValueError(f"losses must be finite numbers, one per size, got {losses!r}")
    c2, c1, _ = np.polyfit(np.log(x), y, 2)
    if not c2 > 0:
        raise ValueError("the IsoFLOP profile has no valley (the fitted parabola opens downwards)")
    return float(math.exp(-c1 / (2 * c2)))


check.guard_module(globals(), arrays=True)  # every public formula checks its arguments (DESIGN.md); lists are arrays
