"""Batch size and learning dynamics: the gradient noise scale, the critical batch size, the
steps–examples trade-off and the learning-rate scaling rules (chapter 10).

A minibatch gradient of B examples is the true gradient G plus noise: with Σ the covariance of
one example's gradient, E[g_B] = G and Cov(g_B) = Σ/B. Following McCandlish, Kaplan, Amodei et
al. (2018), "An Empirical Model of Large-Batch Training" (arXiv:1812.06162), take one SGD step
of size ε on a loss with Hessian H. To second order the expected loss falls by

    ΔL(ε) = ε|G|² − ε²/2 · (GᵀHG + tr(HΣ)/B),

which is largest at

    ε_opt(B) = ε_max / (1 + B_noise/B),      ΔL_opt(B) = ΔL_max / (1 + B_noise/B),

    ε_max = |G|²/(GᵀHG),   ΔL_max = |G|⁴/(2 GᵀHG),   B_noise = tr(HΣ)/(GᵀHG).

Each step of batch B does 1/(1 + B_noise/B) of the best possible step's work, so reaching a
given loss takes

    S = S_min (1 + B_noise/B) steps  and  E = B·S = E_min (1 + B/B_noise) examples,

with E_min = S_min·B_noise. Eliminating B gives the trade-off (S/S_min − 1)(E/E_min − 1) = 1,
and the critical batch size is B_crit = E_min/S_min: there training takes 2 S_min steps and
2 E_min examples. Below B_crit doubling the batch nearly halves the steps for free; above it,
it nearly doubles the examples for little gain. When B_noise changes during training, the
same argument makes B_crit the step-average of B_noise along the path (chapter 10).

**Which noise scale.** B_noise needs the Hessian. This module estimates the *simple* noise
scale B_simple = tr(Σ)/|G|², which needs only gradients: per-example gradients
(:func:`noise_from_per_example`), or the squared norms of the gradient at two batch sizes
(:func:`noise_from_two_batches`: the per-rank and the all-reduced gradient of a data-parallel
step give both for free). B_simple equals B_noise when H is a multiple of the identity; in
general B_noise = B_simple · [tr(HΣ)/trΣ] / [GᵀHG/|G|²], the ratio of the curvature the noise
sees to the curvature the gradient sees. Given a Hessian, :func:`noise_from_per_example`
returns B_noise too.

The original edition gives three definitions of the critical batch that are not the same quantity:
G²/H with G² = E|∇L|² and H = E[∇Lᵀ∇²L ∇L] (with ∇L the true gradient that is ε_max; with
∇L one example's gradient it is (|G|² + trΣ)/(GᵀHG + tr(HΣ)); either way it scales as 1/k when
the loss is multiplied by k, like a learning rate), "equivalently" tr(Σ)/tr(H) (which scales as
k, so it is not a number of examples either), and the noise scale |Var|/|E|² (which is B_simple
when |Var| is read as the trace of the covariance). Chapter 10 shows with a change of loss scale which of
them are batch sizes. We use B_noise in the theory and B_simple to measure it.

**Learning-rate rules.** For SGD the optimal rate ε_opt(B) = ε_max/(1 + B_noise/B) grows
*linearly* with B while B ≪ B_noise and saturates at ε_max above it: that is the linear
scaling rule, η(B) = η₀·B/B₀, and its limit. Adam-like optimisers divide the step by the
root-mean-square of the gradient, √(|G|² + trΣ/B), which for B ≪ B_noise shrinks like 1/√B;
their step is an SGD step of rate η√B/σ, and asking that effective rate to grow linearly in B
gives η ∝ √B: the *square-root* rule η(B) = η₀·√(B/B₀), saturating like the linear one
(η_opt(B) = η_max/√(1 + B_noise/B) when B_simple = B_noise). The original edition states η ∝ √B
but derives η ∝ 1/√B; both rules increase the rate with the batch.

Formula functions accept Python numbers, NumPy arrays and SymPy symbols alike; numeric inputs
are validated (``ValueError`` naming the argument). Batch sizes count examples (sequences or
tokens: whichever unit the gradient was averaged over).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import sympy as sp

from . import _validate as check
from .symbolic import is_symbolic

__all__ = [
    "expected_grad_sq", "estimate_grad_sq", "estimate_trace_cov", "noise_scale_simple",
    "noise_scale", "max_lr", "loss_decrease", "optimal_lr", "optimal_loss_decrease",
    "optimal_lr_adam", "steps", "examples", "tradeoff", "critical_batch", "fit_steps",
    "StepsFit", "NoiseEstimate", "noise_from_per_example",
    "noise_from_two_batches", "lr_linear", "lr_sqrt", "scaling_efficiency",
    "lars_trust_ratio", "lars_relative_update", "ramp_updates",
]


def _sqrt(x):
    return sp.sqrt(x) if isinstance(x, sp.Basic) else np.sqrt(x)


def _different(name_a, a, name_b, b):
    """Numeric a and b must differ (two batch sizes that cannot be the same)."""
    if isinstance(a, sp.Basic) or isinstance(b, sp.Basic):
        return
    if np.any(np.asarray(a, dtype=float) == np.asarray(b, dtype=float)):
        raise ValueError(f"{name_a} and {name_b} must differ, got {a!r} and {b!r}")


# --------------------------------------------------------------------------------------
# Minibatch statistics and the two-batch estimators (McCandlish et al. 2018, appendix A)
# --------------------------------------------------------------------------------------

def expected_grad_sq(grad_sq, trace_cov, batch):
    """E|g_B|² = |G|² + tr(Σ)/B: the mean squared norm of a minibatch gradient (chapter 10).

    ``grad_sq`` is |G|², the squared norm of the true gradient; ``trace_cov`` is tr(Σ), the
    summed variance of one example's gradient; ``batch`` is B.
    """
    check.nonnegative("grad_sq", grad_sq)
    check.nonnegative("trace_cov", trace_cov)
    check.positive("batch", batch)
    return grad_sq + trace_cov / batch


def estimate_grad_sq(grad_sq_small, grad_sq_big, batch_small, batch_big):
    """Unbiased estimate of |G|² from |g|² measured at two batch sizes (chapter 10).

    (B_big |g_big|² − B_small |g_small|²) / (B_big − B_small): solve
    E|g_B|² = |G|² + tr(Σ)/B at the two sizes for |G|². In data-parallel training the
    per-rank gradient is the small batch and the all-reduced one the big batch. The estimate
    is unbiased but noisy; average it over steps before taking ratios.
    """
    check.nonnegative("grad_sq_small", grad_sq_small)
    check.nonnegative("grad_sq_big", grad_sq_big)
    check.positive("batch_small", batch_small)
    check.positive("batch_big", batch_big)
    _different("batch_small", batch_small, "batch_big", batch_big)
    return (batch_big * grad_sq_big - batch_small * grad_sq_small) / (batch_big - batch_small)


def estimate_trace_cov(grad_sq_small, grad_sq_big, batch_small, batch_big):
    """Unbiased estimate of tr(Σ) from |g|² measured at two batch sizes (chapter 10).

    (|g_small|² − |g_big|²) / (1/B_small − 1/B_big), the other half of the same 2 × 2 solve
    as :func:`estimate_grad_sq`.
    """
    check.nonnegative("grad_sq_small", grad_sq_small)
    check.nonnegative("grad_sq_big", grad_sq_big)
    check.positive("batch_small", batch_small)
    check.positive("batch_big", batch_big)
    _different("batch_small", batch_small, "batch_big", batch_big)
    return (grad_sq_small - grad_sq_big) / (1 / batch_small - 1 / batch_big)


def noise_scale_simple(trace_cov, grad_sq):
    """The simple noise scale B_simple = tr(Σ)/|G|² (chapter 10).

    The batch at which the minibatch noise tr(Σ)/B equals the signal |G|². It is the noise
    scale this module measures, because it needs gradients only; it equals B_noise when the
    Hessian is a multiple of the identity.
    """
    check.nonnegative("trace_cov", trace_cov)
    check.positive("grad_sq", grad_sq)
    return trace_cov / grad_sq


def noise_scale(trace_hess_cov, grad_hess_grad):
    """The gradient noise scale B_noise = tr(HΣ)/(GᵀHG) (chapter 10).

    The batch at which the best SGD step does half the work of a noiseless one; the critical
    batch size of the steps–examples trade-off when B_noise is constant.
    """
    check.nonnegative("trace_hess_cov", trace_hess_cov)
    check.positive("grad_hess_grad", grad_hess_grad)
    return trace_hess_cov / grad_hess_grad


def max_lr(grad_sq, grad_hess_grad):
    """ε_max = |G|²/(GᵀHG): the best SGD learning rate with an exact gradient (chapter 10).

    This is what the original edition writes as the critical batch "G²/H" (reading its ∇L as the
    true gradient): a learning rate (it scales as 1/k when the loss is multiplied by k), not a
    batch size.
    """
    check.nonnegative("grad_sq", grad_sq)
    check.positive("grad_hess_grad", grad_hess_grad)
    return grad_sq / grad_hess_grad


def loss_decrease(lr, batch, grad_sq, grad_hess_grad, trace_hess_cov):
    """Expected one-step loss decrease of SGD, to second order (chapter 10):

    ΔL(ε) = ε|G|² − ε²/2 · (GᵀHG + tr(HΣ)/B).
    """
    check.nonnegative("lr", lr)
    check.positive("batch", batch)
    check.nonnegative("grad_sq", grad_sq)
    check.nonnegative("grad_hess_grad", grad_hess_grad)
    check.nonnegative("trace_hess_cov", trace_hess_cov)
    return lr * grad_sq - lr**2 / 2 * (grad_hess_grad + trace_hess_cov / batch)


def optimal_lr(batch, noise_scale, lr_max):
    """The best SGD learning rate at batch B: ε_max / (1 + B_noise/B) (chapter 10).

    Linear in B for B ≪ B_noise (the linear scaling rule), ε_max for B ≫ B_noise.
    """
    check.positive("batch", batch)
    check.positive("noise_scale", noise_scale)
    check.positive("lr_max", lr_max)
    return lr_max / (1 + noise_scale / batch)


def optimal_loss_decrease(batch, noise_scale, max_decrease):
    """The loss decrease of the best SGD step at batch B: ΔL_max / (1 + B_noise/B) (chapter 10)."""
    check.positive("batch", batch)
    check.positive("noise_scale", noise_scale)
    check.positive("max_decrease", max_decrease)
    return max_decrease / (1 + noise_scale / batch)


def optimal_lr_adam(batch, noise_scale, lr_max):
    """The best rate of a normalised (Adam-like) step at batch B: η_max / √(1 + B_noise/B)
    (chapter 10).

    A step η·g/√(|G|² + trΣ/B) is an SGD step of rate η/√(|G|² + trΣ/B); setting that equal to
    ε_opt(B) gives this when B_simple = B_noise. It grows as √B for B ≪ B_noise (the
    square-root rule) and saturates at η_max = ε_max·|G|.
    """
    check.positive("batch", batch)
    check.positive("noise_scale", noise_scale)
    check.positive("lr_max", lr_max)
    return lr_max / _sqrt(1 + noise_scale / batch)


# --------------------------------------------------------------------------------------
# The steps–examples trade-off
# --------------------------------------------------------------------------------------

def steps(batch, noise_scale, min_steps):
    """Optimiser steps to reach a target loss at batch B: S = S_min (1 + B_noise/B) (chapter 10).

    Decreasing in B, towards S_min. ``noise_scale`` is B_noise, or a fitted B_crit.
    """
    check.positive("batch", batch)
    check.positive("noise_scale", noise_scale)
    check.positive("min_steps", min_steps)
    return min_steps * (1 + noise_scale / batch)


def examples(batch, noise_scale, min_examples):
    """Training examples to reach a target loss at batch B: E = E_min (1 + B/B_noise)
    (chapter 10). Increasing in B, from E_min."""
    check.positive("batch", batch)
    check.positive("noise_scale", noise_scale)
    check.positive("min_examples", min_examples)
    return min_examples * (1 + batch / noise_scale)


def tradeoff(steps, examples, min_steps, min_examples):
    """(S/S_min − 1)(E/E_min − 1): equal to 1 on the trade-off curve (chapter 10)."""
    check.positive("steps", steps)
    check.positive("examples", examples)
    check.positive("min_steps", min_steps)
    check.positive("min_examples", min_examples)
    return (steps / min_steps - 1) * (examples / min_examples - 1)


def critical_batch(min_steps, min_examples):
    """The critical batch size B_crit = E_min / S_min (chapter 10).

    At B = B_crit training takes 2 S_min steps and 2 E_min examples. With a constant noise
    scale B_crit = B_noise; in general it is B_noise averaged over the steps of training.
    """
    check.positive("min_steps", min_steps)
    check.positive("min_examples", min_examples)
    return min_examples / min_steps


@dataclass(frozen=True)
class StepsFit:
    """The result of :func:`fit_steps`: S(B) = S_min + E_min/B. Unpacks as
    ``min_steps, min_examples = fit``. ``rel_residuals`` are measured/model − 1 per batch."""

    min_steps: float
    min_examples: float
    rel_residuals: np.ndarray = field(repr=False)

    def __iter__(self):
        return iter((self.min_steps, self.min_examples))

    @property
    def critical_batch(self) -> float:
        """B_crit = E_min / S_min (infinite when the fit has S_min = 0)."""
        return self.min_examples / self.min_steps if self.min_steps > 0 else np.inf

    @property
    def max_abs_rel_residual(self) -> float:
        return float(np.max(np.abs(self.rel_residuals)))

    def steps(self, batch):
        """Fitted steps at ``batch``: S_min + E_min/B."""
        return self.min_steps + self.min_examples / np.asarray(batch, dtype=float)

    def examples(self, batch):
        """Fitted examples at ``batch``: B·S_min + E_min."""
        return np.asarray(batch, dtype=float) * self.steps(batch)


def fit_steps(batch, steps) -> StepsFit:
    """Fit S(B) = S_min + E_min/B to measured steps-to-target (chapter 10).

    Minimises the squared *relative* residuals (steps span orders of magnitude across batch
    sizes, and each measurement is about equally noisy in relative terms), with S_min >= 0 and
    E_min >= 0. Needs at least three batch sizes, two of them different.
    """
    b = np.asarray(batch, dtype=float).ravel()
    s = np.asarray(steps, dtype=float).ravel()
    if b.size != s.size:
        raise ValueError(f"batch and steps must have the same length, got {b.size} and {s.size}")
    check.positive("batch", b)
    check.positive("steps", s)
    if b.size < 3 or np.unique(b).size < 2:
        raise ValueError(f"batch needs at least three points and two different sizes to fit "
                         f"and judge S_min + E_min/B, got {b.tolist()}")
    a = np.column_stack([np.ones_like(b), 1 / b]) / s[:, None]
    target = np.ones_like(s)
    x, *_ = np.linalg.lstsq(a, target, rcond=None)
    if np.any(x < 0):  # the best fit with one coefficient at zero
        trials = []
        for keep in range(2):
            col = a[:, keep]
            trial = np.zeros(2)
            trial[keep] = max(0.0, float(col @ target / (col @ col)))
            trials.append((float(np.sum((a @ trial - target) ** 2)), keep, trial))
        x = min(trials, key=lambda t: (t[0], t[1]))[2]
    s_min, e_min = float(x[0]), float(x[1])
    model = s_min + e_min / b
    return StepsFit(s_min, e_min, s / model - 1)


# --------------------------------------------------------------------------------------
# Measuring the noise scale
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class NoiseEstimate:
    """Gradient statistics and the noise scales computed from them (chapter 10).

    ``grad_sq`` |G|² and ``trace_cov`` tr(Σ) are unbiased estimates; ``simple`` is B_simple.
    With a Hessian, also ``grad_hess_grad`` GᵀHG, ``trace_hess_cov`` tr(HΣ) (both unbiased for
    a given H), ``noise`` B_noise and ``lr_max`` ε_max; otherwise those are None.
    B_simple (or B_noise) is infinite when the gradient is not resolved above the noise
    (the unbiased |G|² came out <= 0).
    """

    grad_sq: float
    trace_cov: float
    simple: float
    samples: int | None = None
    grad_hess_grad: float | None = None
    trace_hess_cov: float | None = None
    noise: float | None = None
    lr_max: float | None = None


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else np.inf


def _as_array(x, name: str) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().double().numpy()
    arr = np.asarray(x, dtype=float)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    return arr


def noise_from_per_example(grads, hessian=None) -> NoiseEstimate:
    """Noise scales from per-example gradients, an (n, P) array or tensor (chapter 10).

    With ḡ their mean and Σ̂ their sample covariance (divided by n − 1), tr(Σ) is estimated by
    tr(Σ̂) and |G|² by |ḡ|² − tr(Σ̂)/n (|ḡ|² alone is biased up by the noise of the mean).
    B_simple is their ratio. Given the Hessian (P, P) of the loss, also
    GᵀHG ≈ ḡᵀHḡ − tr(HΣ̂)/n and tr(HΣ) ≈ tr(HΣ̂), hence B_noise and ε_max.
    """
    g = _as_array(grads, "grads")
    if g.ndim != 2 or g.shape[0] < 2:
        raise ValueError(f"grads must be an (n, P) array with n >= 2 examples, got shape {g.shape}")
    n = g.shape[0]
    mean = g.mean(axis=0)
    dev = g - mean
    trace_cov = float(np.sum(dev**2) / (n - 1))
    grad_sq = float(mean @ mean - trace_cov / n)
    if hessian is None:
        return NoiseEstimate(grad_sq, trace_cov, _ratio(trace_cov, grad_sq), n)
    h = _as_array(hessian, "hessian")
    if h.shape != (g.shape[1], g.shape[1]):
        raise ValueError(f"hessian must be ({g.shape[1]}, {g.shape[1]}) to match grads, got {h.shape}")
    trace_hess_cov = float(np.sum((dev @ h) * dev) / (n - 1))
    ghg = float(mean @ h @ mean - trace_hess_cov / n)
    return NoiseEstimate(grad_sq, trace_cov, _ratio(trace_cov, grad_sq), n, ghg, trace_hess_cov,
                         _ratio(trace_hess_cov, ghg), _ratio(grad_sq, ghg))


def noise_from_two_batches(grad_sq_small, grad_sq_big, batch_small, batch_big) -> NoiseEstimate:
    """B_simple from the squared gradient norms at two batch sizes (chapter 10).

    Pass means over several steps (or exponential moving averages) of |g_small|² and
    |g_big|²: the estimators are unbiased, their ratio is not, so average first and divide
    last (McCandlish et al. 2018, appendix A).
    """
    grad_sq = float(estimate_grad_sq(grad_sq_small, grad_sq_big, batch_small, batch_big))
    trace_cov = float(estimate_trace_cov(grad_sq_small, grad_sq_big, batch_small, batch_big))
    return NoiseEstimate(grad_sq, trace_cov, _ratio(trace_cov, grad_sq))


# --------------------------------------------------------------------------------------
# Learning-rate rules, scaling efficiency, LARS, batch ramps
# --------------------------------------------------------------------------------------

def lr_linear(lr0, batch0, batch):
    """The linear scaling rule η(B) = η₀·B/B₀ (chapter 10): SGD below the noise scale.

    k steps of rate η₀ on batches of B₀ move the weights about as far as one step of rate kη₀
    on a batch of kB₀, as long as the gradient barely changes over the k steps, which is the
    regime B ≪ B_noise. Above B_noise the best rate saturates (:func:`optimal_lr`).
    """
    check.positive("lr0", lr0)
    check.positive("batch0", batch0)
    check.positive("batch", batch)
    return lr0 * batch / batch0


def lr_sqrt(lr0, batch0, batch):
    """The square-root scaling rule η(B) = η₀·√(B/B₀) (chapter 10): Adam-like optimisers.

    Adam's update is divided by the gradient's root-mean-square, which shrinks like 1/√B while
    noise dominates; its effective SGD rate is η√B/σ, and the linear rule for that rate gives
    η ∝ √B. The rate *rises* with B (the original edition's derivation arrives at 1/√B).
    """
    check.positive("lr0", lr0)
    check.positive("batch0", batch0)
    check.positive("batch", batch)
    return lr0 * _sqrt(batch / batch0)


def scaling_efficiency(batch0, steps0, batch, steps):
    """Speed-up over the ideal one: (S₀/S) / (B/B₀) (chapter 10).

    1 when multiplying the batch by k divides the steps by k. Under S = S_min(1 + B_noise/B)
    it is (B₀ + B_noise)/(B + B_noise), which falls as B grows past B_noise.
    """
    check.positive("batch0", batch0)
    check.positive("steps0", steps0)
    check.positive("batch", batch)
    check.positive("steps", steps)
    return (steps0 / steps) / (batch / batch0)


def lars_trust_ratio(weight_norm, grad_norm, weight_decay=0):
    """LARS's layer-wise trust ratio φ = ‖w‖ / (‖∇w‖ + λ‖w‖) (chapter 10; You et al. 2017)."""
    check.positive("weight_norm", weight_norm)
    check.nonnegative("grad_norm", grad_norm)
    check.nonnegative("weight_decay", weight_decay)
    _some_update(grad_norm, weight_decay)
    return weight_norm / (grad_norm + weight_decay * weight_norm)


def _some_update(grad_norm, weight_decay):
    if not is_symbolic(grad_norm, weight_decay) and np.any(
            (np.asarray(grad_norm, dtype=float) == 0) & (np.asarray(weight_decay, dtype=float) == 0)):
        raise ValueError("grad_norm and weight_decay are both 0: there is no update, and the "
                         "trust ratio ‖w‖/0 is undefined")


def lars_relative_update(lr, weight_norm, grad_norm, weight_decay=0, cos=0):
    """‖Δw‖/‖w‖ of one LARS step w ← w − ηφ(∇w + λw) (chapter 10).

    η‖∇w + λw‖/(‖∇w‖ + λ‖w‖), with ``cos`` the cosine between ∇w and w. It equals η when
    λ = 0 or when ∇w points along w (cos = 1), and is smaller otherwise (triangle inequality):
    LARS bounds every layer's relative step by η rather than fixing it at η.
    """
    check.nonnegative("lr", lr)
    check.positive("weight_norm", weight_norm)
    check.nonnegative("grad_norm", grad_norm)
    check.nonnegative("weight_decay", weight_decay)
    if not isinstance(cos, sp.Basic) and not np.all(np.abs(np.asarray(cos, dtype=float)) <= 1):
        raise ValueError(f"cos must lie in [-1, 1], got {cos!r}")
    _some_update(grad_norm, weight_decay)
    wd = weight_decay * weight_norm
    step_norm = _sqrt(grad_norm**2 + 2 * cos * grad_norm * wd + wd**2)
    return lr * step_norm / (grad_norm + wd)


def ramp_updates(tokens, batches):
    """Optimiser updates of a batch ramp: Σ D_i / b_i over its phases (chapter 10).

    ``tokens`` are the tokens (or examples) trained in each phase, ``batches`` the batch used
    in that phase, in the same unit.
    """
    d = np.atleast_1d(np.asarray(tokens, dtype=float))
    b = np.atleast_1d(np.asarray(batches, dtype=float))
    if d.shape != b.shape:
        raise ValueError(f"tokens and batches must have the same length, got {d.size} and {b.size}")
    check.nonnegative("tokens", d)
    check.positive("batches", b)
    return float(np.sum(d / b))


check.guard_module(globals())  # every public formula checks its arguments (DESIGN.md)
