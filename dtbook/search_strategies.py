"""Four ways to search a finite set of configurations for the fastest (chapter 27).

The planner can price every candidate in well under a second, so for it exhaustive search
is the right answer. These strategies matter when one evaluation is expensive: a real
trial run of a configuration costs minutes of a cluster. Each strategy here sees the
candidates only through ``objective(i)`` (smaller is better, ``inf`` for a candidate that
fails) and a feature matrix ``X`` (one row per candidate, e.g. log₂ of TP, PP, DP and the
micro-batch), and returns a :class:`Trace` of what it evaluated, in order, so the
strategies can be compared on *evaluations to the best*.

* grid: every candidate in the order given (the enumeration order);
* random: a seeded random permutation;
* Bayesian: a Gaussian-process surrogate (scikit-learn's ``GaussianProcessRegressor``)
  fitted to log(objective) of what was evaluated, the next candidate the one of highest
  expected improvement;
* evolutionary: tournament selection, uniform crossover, a mutation of one gene by one
  step, the GPU-count repair (the free axis takes whatever keeps the product of the
  parallel degrees equal to the GPU count), and a snap to the nearest real candidate.

A candidate is evaluated at most once: an evaluation is a trial run, and a cache of results
is free. Every strategy stops at ``budget`` evaluations, or as soon as it sees a value at
or below ``target`` (in a comparison, the best value, known from exhaustive search). Not a formula module: it runs searches (tests/test_search_strategies.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Trace", "encode", "grid_search", "random_search", "bayesian_search",
           "evolutionary_search", "STRATEGIES"]


@dataclass(frozen=True)
class Trace:
    """What a search evaluated: candidate indices in order and their objective values."""

    name: str
    order: np.ndarray
    values: np.ndarray

    @property
    def best_so_far(self) -> np.ndarray:
        """The best value seen after 1, 2, … evaluations."""
        return np.minimum.accumulate(self.values)

    @property
    def best_index(self) -> int:
        return int(self.order[int(np.argmin(self.values))])

    def evaluations_to(self, target: float, rtol: float = 0.0):
        """Evaluations until a value within ``rtol`` of ``target`` was seen (None if never)."""
        hit = np.nonzero(self.values <= target * (1 + rtol))[0]
        return int(hit[0]) + 1 if hit.size else None


def encode(candidates, keys) -> np.ndarray:
    """A feature matrix for a list of configuration dicts: log₂ of each positive numeric key
    (the parallel degrees and batch sizes are powers of two, so a step of one is a doubling),
    a numeric key that can be 0 (the ZeRO stage) as it is, and the index in sorted order of
    each text key (a recompute mode)."""
    cols = []
    for key in keys:
        vals = [c[key] for c in candidates]
        if all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
               for v in vals):
            arr = np.asarray(vals, dtype=float)
            cols.append(np.log2(arr) if np.all(arr > 0) else arr)   # a ZeRO stage 0-3 as is
        else:
            levels = sorted({str(v) for v in vals})
            cols.append(np.asarray([levels.index(str(v)) for v in vals], dtype=float))
    return np.column_stack(cols) if cols else np.zeros((len(candidates), 0))


class _Evaluator:
    """objective() with a cache and the order of first evaluations."""

    def __init__(self, objective, n, target=None):
        self.objective, self.n, self.target = objective, n, target
        self.order, self.values, self.seen = [], [], {}

    def __call__(self, i):
        i = int(i)
        if i not in self.seen:
            v = float(self.objective(i))
            self.seen[i] = v
            self.order.append(i)
            self.values.append(v)
        return self.seen[i]

    @property
    def count(self):
        return len(self.order)

    def done(self, budget):
        """The budget is spent, or the target (the known best, in a comparison) was hit."""
        hit = self.target is not None and self.values and min(self.values) <= self.target
        return self.count >= budget or bool(hit)

    def unseen(self):
        return np.setdiff1d(np.arange(self.n), np.fromiter(self.seen, int, len(self.seen)))

    def trace(self, name):
        return Trace(name, np.asarray(self.order, dtype=int), np.asarray(self.values))


def _budget(budget, n):
    if budget is None:
        return n
    if int(budget) != budget or budget < 1:
        raise ValueError(f"budget must be a whole number >= 1, got {budget!r}")
    return min(int(budget), n)


def grid_search(X, objective, budget=None, seed=None, target=None) -> Trace:
    """Evaluate the candidates in the order given (chapter 27). ``seed`` is ignored."""
    ev = _Evaluator(objective, len(X), target)
    budget = _budget(budget, len(X))
    for i in range(budget):
        if ev.done(budget):
            break
        ev(i)
    return ev.trace("grid")


def random_search(X, objective, budget=None, seed=0, target=None) -> Trace:
    """Evaluate the candidates in a seeded random order (chapter 27)."""
    ev = _Evaluator(objective, len(X), target)
    budget = _budget(budget, len(X))
    for i in np.random.default_rng(seed).permutation(len(X))[:budget]:
        if ev.done(budget):
            break
        ev(i)
    return ev.trace("random")


def _finite_targets(values):
    """log of the objective for the surrogate; failed candidates (inf) get a value worse
    than anything seen, so the surrogate learns to avoid their neighbourhood."""
    v = np.asarray(values, dtype=float)
    ok = np.isfinite(v)
    if not ok.any():
        return np.zeros_like(v)
    logs = np.log(np.where(ok, v, 1.0))
    worst, spread = logs[ok].max(), np.ptp(logs[ok]) if ok.sum() > 1 else 1.0
    return np.where(ok, logs, worst + max(spread, 0.5))


def bayesian_search(X, objective, budget=None, seed=0, initial=5, xi=0.01, refit=10,
                    target=None) -> Trace:
    """Bayesian optimisation over the candidates (chapter 27).

    ``initial`` seeded random evaluations, then each step fits a Gaussian process
    (scikit-learn's ``GaussianProcessRegressor``: a Matérn ν = 5/2 kernel on the features
    scaled to [0, 1], plus a noise term) to log(objective) of everything evaluated, and
    evaluates the unseen candidate of highest expected improvement
    EI = (y* − μ − ξ)Φ(z) + σφ(z), z = (y* − μ − ξ)/σ, for minimisation. The kernel's
    hyperparameters are learnt by maximum likelihood every ``refit`` evaluations and kept in
    between (learning them costs a few hundred times more than a fit with them fixed);
    ``refit=0`` never learns them and keeps the starting kernel (length scale 0.3 of each
    feature's range, output scale 1 on the normalised log objective, noise 10⁻³).
    """
    import warnings

    from scipy.stats import norm
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel
    from threadpoolctl import threadpool_limits

    X = np.asarray(X, dtype=float)
    n = len(X)
    budget = _budget(budget, n)
    rng = np.random.default_rng(seed)
    ev = _Evaluator(objective, n, target)
    for i in rng.permutation(n)[:min(initial, budget)]:
        ev(i)
    span = np.ptp(X, axis=0) if n > 1 else np.ones(X.shape[1])
    Z = (X - X.min(axis=0)) / np.where(span > 0, span, 1.0)      # features on [0, 1]
    kernel = (ConstantKernel(1.0, (1e-2, 1e2)) * Matern(0.3, (0.05, 10.0), nu=2.5)
              + WhiteKernel(1e-3, (1e-6, 1e-1)))
    learnt_at = None
    with threadpool_limits(1), warnings.catch_warnings():   # small matrices: threads only cost
        warnings.simplefilter("ignore", ConvergenceWarning)
        while not ev.done(budget):
            y = _finite_targets(ev.values)
            learn = refit > 0 and (learnt_at is None or ev.count - learnt_at >= refit)
            gp = GaussianProcessRegressor(kernel, normalize_y=True, random_state=seed,
                                          optimizer="fmin_l_bfgs_b" if learn else None)
            gp.fit(Z[ev.order], y)
            if learn:
                kernel, learnt_at = gp.kernel_, ev.count
            rest = ev.unseen()
            mu, sd = gp.predict(Z[rest], return_std=True)
            gain = y.min() - mu - xi
            with np.errstate(divide="ignore", invalid="ignore"):
                z = np.where(sd > 0, gain / sd, 0.0)
            ei = np.where(sd > 0, gain * norm.cdf(z) + sd * norm.pdf(z), np.maximum(gain, 0.0))
            ev(rest[int(np.argmax(ei))])
    return ev.trace("Bayesian")


def evolutionary_search(X, objective, budget=None, seed=0, population=8, tournament=3,
                        mutation=0.5, product=None, total=None, free=None, target=None) -> Trace:
    """A small genetic algorithm over the candidates' features (chapter 27).

    Start from ``population`` random candidates. Each child: two parents, each the best of
    ``tournament`` members drawn at random; every gene from one parent or the other (uniform
    crossover); with probability ``mutation`` one gene moved one step up or down. Then the
    **GPU-count repair**: when ``product`` lists the feature columns holding log₂ of the
    parallel degrees, whose sum must be ``total`` (log₂ of the GPU count), the column
    ``free`` (say DP) is set to make the sum right. Last, the child is snapped to the
    nearest candidate not yet evaluated (L1 distance in feature space), which also repairs
    what the GPU count cannot (divisibility, memory). It replaces the population's worst
    member if it is better.
    """
    X = np.asarray(X, dtype=float)
    n = len(X)
    budget = _budget(budget, n)
    rng = np.random.default_rng(seed)
    ev = _Evaluator(objective, n, target)
    pop = [int(i) for i in rng.permutation(n)[:min(population, budget)]]
    for i in pop:
        ev(i)
    while not ev.done(budget):
        fit = np.array([ev.seen[i] for i in pop])

        def pick():
            members = rng.choice(len(pop), size=min(tournament, len(pop)), replace=False)
            return pop[members[np.argmin(fit[members])]]

        a, b = X[pick()], X[pick()]
        child = np.where(rng.random(X.shape[1]) < 0.5, a, b)
        if rng.random() < mutation:
            g = rng.integers(X.shape[1])
            child[g] += rng.choice([-1.0, 1.0])
        if product is not None:
            others = [c for c in product if c != free]
            child[free] = total - child[others].sum()
        rest = ev.unseen()
        j = int(rest[np.argmin(np.abs(X[rest] - child).sum(axis=1))])
        v = ev(j)
        worst = int(np.argmax(fit))
        if v < fit[worst]:
            pop[worst] = j
    return ev.trace("evolutionary")


STRATEGIES = {"grid": grid_search, "random": random_search, "Bayesian": bayesian_search,
              "evolutionary": evolutionary_search}
