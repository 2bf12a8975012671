"""The exercise checker: every registered exercise end to end, then the checker itself on
synthetic exercises written to a temporary folder (``$DTBOOK_EXERCISES``)."""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import dtbook
from dtbook import exercises as exm
from dtbook.exercises import Exercise, check, get, registry
from dtbook.units import GB, GiB, parse_quantity

BAD_INPUTS = ["banana", float("nan"), [1, 2], {}]


def _registered() -> dict:
    try:
        return registry()
    except Exception:  # test_registry_loads reports the error itself
        return {}


REG = _registered()
IDS = list(REG)
BOOK_IDS = [i for i in IDS if REG[i].book_answer is not None]


# ---- helpers shared by the registered and the synthetic exercises ---------------------------

def _paths(tree, path=()):
    if isinstance(tree, dict):
        return [p for k, v in tree.items() for p in _paths(v, path + (k,))]
    if isinstance(tree, (tuple, list)):
        return [p for i, v in enumerate(tree) for p in _paths(v, path + (i,))]
    return [path]


def _replace(tree, path, fn):
    if not path:
        return fn(tree)
    head, rest = path[0], path[1:]
    if isinstance(tree, dict):
        return {k: _replace(v, rest, fn) if k == head else v for k, v in tree.items()}
    return tuple(_replace(v, rest, fn) if i == head else v for i, v in enumerate(tree))


def _perturb(ex: Exercise, leaf, factor):
    """The leaf made wrong: scaled numbers and expressions, another choice, the other bool."""
    if isinstance(leaf, (bool, np.bool_)):
        return not leaf
    if isinstance(leaf, str):
        others = [c for c in ex.choices if c.lower() != leaf.lower()]
        return others[0] if others else leaf  # a free-text choice: nothing to perturb
    if isinstance(leaf, sp.Basic):
        return sp.nsimplify(factor) * leaf
    return leaf * factor if leaf != 0 else 1.0


def assert_reference_accepted(ex: Exercise):
    answers = [ex.solution_in_unit(), ex.solution_in_unit(text=True)]
    if not isinstance(ex.solution(), (tuple, list, dict)):
        answers.append(ex.solution_display())
    for answer in answers:
        r = ex.grade(answer)
        assert r.correct and r.status == "correct", f"{ex.id}: {answer!r} rejected: {r.message}"
        assert r.message.startswith(f"✓ {ex.id}")


def assert_perturbed_rejected(ex: Exercise, factor: float):
    ref = ex.solution_in_unit()
    for path in _paths(ref):
        wrong = _replace(ref, path, lambda leaf: _perturb(ex, leaf, factor))
        if wrong == ref:  # a choice with a single option: nothing to perturb
            continue
        r = ex.grade(wrong)
        assert not r.correct and r.status == "wrong", f"{ex.id}: {wrong!r} accepted: {r.message}"
        assert r.message.startswith(f"✗ {ex.id} not yet")
        if ex.hint:
            assert ex.hint in r.message


def assert_bad_inputs_explained(ex: Exercise):
    for bad in BAD_INPUTS:
        r = ex.grade(bad)
        assert not r.correct and r.message.strip(), (ex.id, bad)
        assert r.status in ("invalid", "wrong"), (ex.id, bad, r)
    for blank in (..., None):
        r = ex.grade(blank)
        assert not r.correct and r.status == "unanswered" and "not answered yet" in r.message


def assert_book_answer(ex: Exercise):
    """The book's printed answer is accepted, or rejected where a book_note says so. A part the
    book does not print is None and is not compared; at least one part must be printed."""
    r = ex.grade(ex.book_answer)
    printed = [s for _, s in r.parts if s != "unanswered"]
    assert printed, f"{ex.id}: book_answer {ex.book_answer!r} prints nothing: {r.message}"
    if ex.book_note:
        assert not r.correct and r.status == "wrong", (
            f"{ex.id}: book_note says we differ from the book, but the checker accepts "
            f"{ex.book_answer!r}: {r.message}")
    else:
        assert all(s == "correct" for s in printed), (
            f"{ex.id}: the book's {ex.book_answer!r} is rejected: {r.message}")


# ---- every registered exercise --------------------------------------------------------------

def test_registry_loads():
    reg = registry()  # raises with the file named when a chapter's exercise file is broken
    for ex_id, ex in reg.items():
        assert ex.id == ex_id and re.fullmatch(r"\d+[a-z]*\.\d+", ex_id)
        assert ex.source.stem == ex_id.split(".")[0]
        assert ex.prompt.strip() and ex.hint.strip(), f"{ex_id} needs a prompt and a hint"
        assert not ex.book_note or ex.book_answer is not None, f"{ex_id}: note without answer"


@pytest.mark.parametrize("ex_id", IDS)
def test_reference_accepted(ex_id):
    ex = get(ex_id)
    assert isinstance(ex.solution_display(), str)
    assert_reference_accepted(ex)


@pytest.mark.parametrize("factor", [1.1, 0.5])
@pytest.mark.parametrize("ex_id", IDS)
def test_perturbed_rejected(ex_id, factor):
    assert_perturbed_rejected(get(ex_id), factor)


@pytest.mark.parametrize("ex_id", IDS)
def test_bad_inputs_and_blanks(ex_id, capsys):
    ex = get(ex_id)
    assert_bad_inputs_explained(ex)
    assert check(ex_id, "banana") is None
    assert capsys.readouterr().out.startswith("✗")


@pytest.mark.parametrize("ex_id", BOOK_IDS)
def test_book_answer(ex_id):
    assert_book_answer(get(ex_id))


# ---- the checker itself, on synthetic exercises ---------------------------------------------

SYNTHETIC = {
    "90.py": '''
        import sympy as sp
        from dtbook.exercises import exercise
        from dtbook import symbolic as S
        from dtbook.units import GB, GiB, us

        @exercise("90.1", prompt="Ring all-reduce time?", unit="ms", hint="2(P-1) terms",
                  book_answer="399 ms")
        def _():
            return 2 * 255 * 2 * us + 2 * 255 / 256 * 10 * GB / (50 * GB)

        @exercise("90.2", prompt="Model states of 13B?", unit="GB", hint="16 bytes each",
                  book_answer="200 GB", book_note="the book rounds 208 GB down to 200 GB")
        def _():
            return 16 * 13e9

        @exercise("90.3", prompt="Time and size?", unit=("ms", "GB"), hint="one then two",
                  book_answer=("400 ms", None))
        def _():
            return (0.4, 208 * GB)

        @exercise("90.4", prompt="Per-GPU?", unit={"t": "s", "m": "GiB"}, hint="divide")
        def _():
            return {"t": 3.0, "m": 80 * GiB}

        @exercise("90.5", prompt="Training FLOPs?", kind="expr", symbols="Psi D", hint="6")
        def _():
            return 6 * S.params * S.tokens

        @exercise("90.6", prompt="Which?", kind="choice", choices=("ring", "tree"), hint="α")
        def _():
            return "tree"

        @exercise("90.7", prompt="Bound?", kind="bool", hint="intensity")
        def _():
            return True

        @exercise("90.10", prompt="MFU?", unit="%", hint="achieved / peak", book_answer=0.4)
        def _():
            return 0.4 / 100
    ''',
    "91.py": '''
        from dtbook.exercises import exercise
        from dtbook import symbolic as S

        @exercise("91.1", prompt="Cost?", unit="$", hint="GPU-hours times price",
                  book_answer="$3M")
        def _():
            return 3.0e6

        @exercise("91.2", prompt="Mixed", unit=("TFLOP/s", "", "days"), hint="three")
        def _():
            return (989e12, "ring", 2 * 86400.0)

        @exercise("91.3", prompt="Crossover and rate", kind="expr", hint="alpha beta")
        def _():
            return (S.alpha * S.beta, S.nbytes / S.beta)

        @exercise("91.4", prompt="Overlap left?", unit="x", hint="zero")
        def _():
            return 0.0
    ''',
    "03a.py": '''
        from dtbook.exercises import exercise

        @exercise("03a.1", prompt="Link bandwidth?", unit="GB/s", hint="bits", rtol=0.02)
        def _():
            return 50e9
    ''',
}


def _write(folder: Path, files: dict):
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(textwrap.dedent(text))
    return folder


@pytest.fixture
def synthetic(tmp_path, monkeypatch):
    monkeypatch.setenv("DTBOOK_EXERCISES", str(_write(tmp_path / "ex", SYNTHETIC)))
    return registry()


def _msg(ex_id, answer):
    return get(ex_id).grade(answer).message


def test_synthetic_registry_order_and_generic_checks(synthetic):
    assert list(synthetic) == ["03a.1", "90.1", "90.2", "90.3", "90.4", "90.5", "90.6", "90.7",
                               "90.10", "91.1", "91.2", "91.3", "91.4"]
    for ex in synthetic.values():  # the generic tests above, on every kind of answer
        assert_reference_accepted(ex)
        for factor in (1.1, 0.5):
            assert_perturbed_rejected(ex, factor)
        assert_bad_inputs_explained(ex)
        if ex.book_answer is not None:
            assert_book_answer(ex)


def test_partial_book_answer(synthetic):
    """A book answer that prints one part of a pair: the printed part is compared, the other
    is left out; a wrong printed part or nothing printed fails."""
    import dataclasses
    ex = get("90.3")
    r = ex.grade(ex.book_answer)
    assert r.parts == (("#1", "correct"), ("#2", "unanswered")) and not r.correct
    assert_book_answer(ex)
    with pytest.raises(AssertionError, match="rejected"):
        assert_book_answer(dataclasses.replace(ex, book_answer=("300 ms", None)))
    with pytest.raises(AssertionError, match="prints nothing"):
        assert_book_answer(dataclasses.replace(ex, book_answer=(None, None)))


def test_solution_units_and_display(synthetic):
    ex = get("90.1")
    assert ex.solution() == pytest.approx(0.3994575) and ex.unit == "ms"
    assert ex.solution_in_unit() == pytest.approx(399.4575)
    assert ex.solution_display() == "399.5 ms"
    assert get("90.3").solution_display() == "(400 ms, 208 GB)"
    assert get("90.4").solution_in_unit() == {"t": 3.0, "m": 80.0}
    assert get("90.10").solution_display() == "0.4%"
    assert get("91.1").solution_display() == "$3M"
    assert get("91.2").solution_in_unit(text=True) == ("989 TFLOP/s", "ring", "2 days")
    assert (ex.prompt, ex.hint, ex.book_answer, ex.book_note) == (
        "Ring all-reduce time?", "2(P-1) terms", "399 ms", "")


@pytest.mark.parametrize("answer", [399.2, "399 ms", "0.4 s", "399450 us", "399,458 µs",
                                    np.float32(399.2), np.array(399.5), np.int64(399),
                                    sp.Integer(399), parse_quantity("0.3995 s"), " 399 "])
def test_numbers_in_many_forms(synthetic, answer):
    assert get("90.1").grade(answer).correct


def test_torch_scalars(synthetic):
    torch = pytest.importorskip("torch")
    ex = get("90.1")
    assert ex.grade(torch.tensor(399.3)).correct
    assert ex.grade(torch.tensor(399.3, requires_grad=True) * 1).correct
    assert ".item()" in ex.grade(torch.tensor([399.3])).message
    assert get("90.7").grade(torch.tensor(2.0) > 1).correct  # a comparison of tensors
    assert get("90.7").grade(torch.tensor(1.0)).status == "invalid"


@pytest.mark.parametrize("answer,phrase", [
    (798, "off by a factor of 2"), (199.7, "off by a factor of 2"),
    (39.95, "order of magnitude (10^-1)"), (3995, "order of magnitude (10^1)"),
    (0.3995, "unit prefix"), ("399 s", "unit prefix"), (399.5 * 8, "bits vs bytes"),
    (-399.5, "wrong sign"), (440, "+10.1% (too high)"), (360, "(too low)"),
    ("208 GB", "is a size in bytes, but this answer is a time"),
])
def test_time_diagnostics(synthetic, answer, phrase):
    r = get("90.1").grade(answer)
    assert not r.correct and phrase in r.message and "Hint: 2(P-1) terms" in r.message


def test_gib_and_gb_are_different_answers(synthetic):
    ex = get("90.2")  # 208 GB
    assert ex.grade("208 GB").correct and ex.grade("193.7 GiB").correct
    assert ex.grade(208).correct and ex.grade("1.664 Tb").correct  # bits, spelled out
    for wrong in ("208 GiB", 193.7, "208000 MiB"):
        assert re.search(r"looks like (GiB vs GB|MiB vs MB)", _msg("90.2", wrong)), wrong
    assert "TiB vs TB" in _msg("90.2", "0.208 TiB")
    assert "bits vs bytes" in _msg("90.2", "208 Gb")
    assert "is a time" in _msg("90.2", "208 ms")
    assert "a unit prefix" in _msg("90.2", "208 MB")
    assert "GiB vs GB" in _msg("90.4", {"t": 3, "m": "80 GB"})  # the answer is in GiB here


@pytest.mark.parametrize("answer,phrase", [
    ("banana", "could not find a number"), ("3 parsecs", "unknown unit 'parsecs'"),
    (float("nan"), "finite"), (float("inf"), "finite"), ("1e999 ms", "too large"),
    ([1, 2], "got a list"), ({}, "got a dict"), ((399,), "got a tuple"), (True, "yes/no"),
    (np.arange(3), "shape (3,)"), (np.array([399.5]), ".item()"), (1 + 2j, "complex"),
    (object(), "got an object"), (sp.Symbol("x"), "expression"), ("1.5*10^9 ms", "1.5e+09 ms"),  # read as 1.5e9 ms
])
def test_bad_scalar_inputs(synthetic, answer, phrase, capsys):
    r = get("90.1").grade(answer)
    assert not r.correct and phrase in r.message, r.message
    assert check("90.1", answer) is None and capsys.readouterr().out.startswith("✗ 90.1")


def test_tuple_and_dict_answers(synthetic):
    t, d = get("90.3"), get("90.4")
    assert t.grade((400, 208)).correct and t.grade(["0.4 s", "193.7 GiB"]).correct
    r = t.grade((400, 416))
    assert not r.correct and "✓ #1" in r.message and "✗ #2" in r.message and "factor of 2" in r.message
    assert "tuple of 2 values, got 1 value" in t.grade((400,)).message
    assert "tuple of 2 values, got 3 values" in t.grade((400, 208, 1)).message
    assert "tuple of 2 values, got a whole number" in t.grade(5).message
    part = t.grade((400, ...))
    assert not part.correct and "not answered yet" in part.message
    assert t.grade((..., ...)).status == "unanswered"
    assert "? #2" in t.grade((400, "banana")).message
    assert d.grade({"t": "3 s", "m": "85.9 GB"}).correct
    assert "missing ['m']" in d.grade({"t": 3}).message
    assert "unexpected ['x']" in d.grade({"t": 3, "m": 80, "x": 1}).message
    assert "should be a dict" in d.grade((3, 80)).message
    mixed = get("91.2")
    assert mixed.grade(("0.989 PFLOP/s", "RING", "48 hours")).correct
    assert "one of" not in mixed.grade((989, "tree", 2)).message  # a free choice: no options


def test_expression_answers(synthetic):
    ex = get("90.5")
    psi, d = sp.symbols("Psi D")  # no assumptions: matched to the house symbols by name
    for ok in ("6*Psi*D", "6 Psi D", "6*Ψ*D", "3*D*Psi*2", 6 * psi * d, "6*(Psi*D)**1"):
        assert ex.grade(ok).correct, ok
    assert "off by a factor of 2" in ex.grade("12*Psi*D").message
    assert "not equivalent" in ex.grade("6*Psi*D + 1").message
    assert "unknown symbol(s) x" in ex.grade("6*x").message
    assert "could not read '6*Psi*'" in ex.grade("6*Psi*").message
    assert "not equivalent" in ex.grade(5).message
    assert ex.grade("6*Psi^1*D").correct  # ^ is read as a power
    pair = get("91.3")  # symbols inferred from the solution
    assert pair.grade(("alpha*beta", "n/beta")).correct
    assert not pair.grade(("alpha*beta", "n*beta")).correct


def test_choice_and_bool_answers(synthetic):
    c, b = get("90.6"), get("90.7")
    assert c.grade(" Tree ").correct and not c.grade("ring").correct
    assert "not one of the options ['ring', 'tree']" in c.grade("banana").message
    assert "got a whole number" in c.grade(3).message
    for yes in (True, np.bool_(True), "yes", "Y", "true"):
        assert b.grade(yes).correct
    assert not b.grade("no").correct and b.grade("no").status == "wrong"
    assert "True or False" in b.grade(1).message


def test_other_units(synthetic):
    assert get("90.10").grade("0.4%").correct and get("90.10").grade(0.4).correct
    assert get("90.10").grade("0.4").correct  # a bare number is read in the unit: 0.4%
    # a fraction typed where the unit is % is read as one, and says so
    assert "read 0.004 as a fraction" in _msg("90.10", 0.004) and get("90.10").grade(0.004).correct
    assert "percent vs fraction" in _msg("90.10", "0.004%")
    assert get("91.1").grade("$3M").correct and get("91.1").grade("3e6 USD").correct
    assert get("91.4").grade(0).correct and "should be 0" in _msg("91.4", 0.1)
    assert get("03a.1").grade("400 Gb/s").correct and get("03a.1").grade("400 Gbps").correct
    assert "bits vs bytes" in _msg("03a.1", "400 GB/s")


def test_check_prints_verdicts(synthetic, capsys):
    for answer, mark in ((399.5, "✓ 90.1 correct"), (798, "✗ 90.1 not yet"),
                         (..., "… 90.1 not answered yet"), ("x", "✗ 90.1 can't read")):
        assert check("90.1", answer) is None
        assert capsys.readouterr().out.startswith(mark)
    check("90.1")
    assert "not answered yet" in capsys.readouterr().out


def test_unknown_ids(synthetic, capsys):
    check("90.9", 1)
    out = capsys.readouterr().out
    assert out.startswith("✗ no exercise '90.9'") and "90.1, 90.2" in out
    check("3a.1", 1)
    assert "did you mean 03a.1" in capsys.readouterr().out
    check("9.1", 1)
    assert re.search(r"did you mean (9\d\.\d+, )+", capsys.readouterr().out)
    with pytest.raises(KeyError, match="no exercise '99.1'"):
        get("99.1")
    with pytest.raises(ValueError, match="strings such as '04.1'"):
        get(4.1)


def test_file_errors(tmp_path, monkeypatch):
    head = "from dtbook.exercises import exercise\n"
    body = '@exercise("{}", prompt="p", hint="h"{})\ndef _():\n    return 1.0\n'
    cases = {
        "defined twice": body.format("50.1", "") * 2,
        "is not in chapter '50'": body.format("51.1", ""),
        "bad unit 'parsec'": body.format("50.1", ', unit="parsec"'),
        "needs choices": body.format("50.1", ', kind="choice"'),
        "kind must be one of": body.format("50.1", ', kind="number?"'),
        "ids look like": body.format("50-1", ""),
    }
    for i, (phrase, text) in enumerate(cases.items()):
        folder = _write(tmp_path / str(i), {"50.py": head + text})
        monkeypatch.setenv("DTBOOK_EXERCISES", str(folder))
        with pytest.raises(ValueError, match=re.escape(phrase)):
            registry()


def test_authoring_error_is_loud(tmp_path, monkeypatch):
    monkeypatch.setenv("DTBOOK_EXERCISES", str(_write(tmp_path, {"50.py": (
        "from dtbook.exercises import exercise\n"
        '@exercise("50.1", prompt="p", hint="h")\ndef _():\n    return None\n')})))
    with pytest.raises(TypeError, match="not a finite number"):
        get("50.1").grade(1.0)


def test_reload_on_change_and_missing_folder(tmp_path, monkeypatch, capsys):
    folder = _write(tmp_path / "ex", {"60.py": SYNTHETIC["03a.py"].replace("03a", "60")})
    monkeypatch.setenv("DTBOOK_EXERCISES", str(folder))
    assert list(registry()) == ["60.1"]
    (folder / "60.py").write_text((folder / "60.py").read_text() + "\n\n" + textwrap.dedent(
        SYNTHETIC["03a.py"]).replace("03a", "60").replace("60.1", "60.2"))
    assert list(registry()) == ["60.1", "60.2"]
    monkeypatch.setenv("DTBOOK_EXERCISES", str(tmp_path / "nowhere"))
    assert registry() == {}
    check("60.1", 1)
    assert "no exercises found" in capsys.readouterr().out


def test_default_folder_is_repo_root(monkeypatch):
    monkeypatch.delenv("DTBOOK_EXERCISES", raising=False)
    assert exm._folder() == Path(dtbook.__file__).resolve().parent.parent / "exercises"


def test_get_reads_only_the_chapters_file(synthetic, tmp_path):
    (tmp_path / "ex" / "92.py").write_text("raise RuntimeError('broken chapter file')\n")
    assert get("90.1").grade("~400 ms").correct  # 92.py is never imported for 90.1
    with pytest.raises(RuntimeError, match="broken chapter file"):
        registry()


@settings(max_examples=60, deadline=None)
@given(value=st.floats(1e-9, 1e24), unit=st.sampled_from(
    ["GB", "GiB", "MB", "ms", "s", "days", "years", "TFLOP/s", "FLOP", "GB/s", "%", "x", "", "$"]))
def test_any_reference_round_trips(value, unit):
    ex = Exercise("70.1", "p", lambda: value, unit=unit, hint="h")
    assert ex.grade(ex.solution_in_unit()).correct and ex.grade(ex.solution_display()).correct
    assert not ex.grade(ex.solution_in_unit() * 1.1).correct
    assert "factor of 2" in ex.grade(ex.solution_in_unit() * 0.5).message


@settings(max_examples=60, deadline=None)
@given(st.floats(1e3, 1e15))
def test_gib_gb_confusion_is_named(nbytes):
    ex = Exercise("70.2", "p", lambda: nbytes, unit="GB", hint="h")
    typed = f"{nbytes / GB:.6g} GiB"  # the right number with the binary unit
    assert "GiB vs GB" in ex.grade(typed).message
    assert ex.grade(f"{nbytes / GiB:.6g} GiB").correct
    assert math.isclose(parse_quantity(typed).value / nbytes, GiB / GB, rel_tol=1e-5)


# ---- exercises whose reference must stay the library's own count (issue 20) ------------------

def test_21_5_counts_a_stage_as_device_memory_does():
    """21.5's reference is checkpointed_activation_bytes over the p·L kept inputs of the
    micro-batches in flight plus one recomputed block: the count memory.device_memory makes."""
    from dtbook import activations as act, memory, pipeline_parallel
    layers, pp, m, b, s, h, a = 16, 4, 8, 2, 1024, 1024, 16
    opts = dict(value_bytes=2, mask_bytes=1, dropout=False, attention="flash")
    layer = sum(act.activation_breakdown(b, s, h, a, **opts).values())
    kept = act.activation_breakdown(b, s, h, a, recompute="full", **opts)["layer_input"]
    in_flight = pipeline_parallel.activations_in_flight(pp, m)
    for k in (1, 2, 4):
        whole = memory.device_memory(1e9, layers, h, a, 32000, batch=b, seq=s, pp=pp,
                                     microbatches=m, recompute=k)["activations"]
        assert whole == pytest.approx(act.checkpointed_activation_bytes(
            in_flight * layers // pp, layer, k, boundary_bytes=kept))
    # and the exercise's numbers written out: p·(L/k)·boundary + k·M_layer
    p, mb = 4, 1e6
    assert get("21.5").solution() == pytest.approx(
        (p * 20 * 64 * mb, p * 20 / math.sqrt(20) * 64 * mb + math.sqrt(20) * 64 * mb,
         p * 20 * 4 * mb + 64 * mb))


def test_24_4_is_the_simulators_saving():
    """24.4: the share of the v = 1 step that two chunks save, from the discrete-event
    simulator of the two schedules (backward twice the forward), equals the reference."""
    from dtbook import schedules
    one = schedules.simulate("1f1b", 16, 32, t_forward=1.0, t_backward=2.0).makespan
    two = schedules.simulate("interleaved-1f1b", 16, 32, virtual_stages=2, t_forward=1.0,
                             t_backward=2.0).makespan
    assert get("24.4").solution() == pytest.approx((one - two) / one, rel=1e-9)
    b1, b2 = 15 / 47, 15 / 79
    assert get("24.4").solution() == pytest.approx((b1 - b2) / (1 - b2))


def test_whole_number_answers_are_the_whole_optimum():
    """28.7 and 29.3 ask for whole numbers: the first P at which the all-gather sends more
    (bytes written out per rank), and the whole H with the lowest C(H)."""
    d, k = 1e9, 1e7
    gather = lambda p: (p - 1) / p * p * k * (2 + 4)   # noqa: E731 -- fp16 value, int32 index
    ring = lambda p: 2 * (p - 1) / p * 2 * d           # noqa: E731 -- fp16 ring all-reduce
    first = get("28.7").solution()
    assert gather(first) > ring(first) and gather(first - 1) <= ring(first - 1)
    cost = lambda h: 100e-3 + 50e-3 / h + 1e-3 * h     # noqa: E731 -- C(H) in seconds
    h, c = get("29.3").solution()
    assert h == min(range(1, 100), key=cost) and c == pytest.approx(cost(h))
