"""Exercises for chapter 30, Reduced Precision."""

from dtbook import precision as pr
from dtbook.exercises import exercise

FP16, BF16, E4M3, E5M2 = (pr.FORMATS[k] for k in ("fp16", "bf16", "e4m3", "e5m2"))


@exercise(
    "30.1",
    prompt=("fp16 has 5 exponent bits and 10 mantissa bits, IEEE-style (the top exponent field "
            "is reserved for infinities and NaN). From the bit fields alone: what are its "
            "largest finite value, its smallest normal number and its smallest subnormal "
            "number? Answer as a triple."),
    unit=("", "", ""),
    hint="bias = 2^(e−1) − 1 = 15; the largest exponent field for numbers is 30; subnormals "
         "divide the smallest normal by 2^m.",
)
def _():
    return FP16.max, FP16.smallest_normal, FP16.smallest_subnormal


@exercise(
    "30.2",
    prompt=("float8_e4m3fn has 4 exponent bits and 3 mantissa bits, and no infinities: the "
            "top exponent field holds numbers, only its all-ones mantissa is NaN. What is its "
            "largest value, and what would it be if the top exponent field were reserved as "
            "in IEEE formats? Answer as a pair (fn, IEEE-style)."),
    unit=("", ""),
    hint="bias 7. With the top field usable the exponent reaches 15 − 7 = 8 but the mantissa "
         "stops one short of all ones.",
)
def _():
    return pr.max_value(4, 3, "fn"), pr.max_value(4, 3, "ieee")


@exercise(
    "30.3",
    prompt=("A gradient entry of magnitude 10⁻⁶ is cast to fp16. What is the smallest "
            "power-of-two loss scale that lifts it into fp16's normal range?"),
    unit="",
    hint="s ≥ 2⁻¹⁴ / |g|, then round up to a power of two.",
    book_answer=64,
)
def _():
    return pr.min_loss_scale(1e-6)


@exercise(
    "30.4",
    prompt=("Values are spread log-uniformly over [10⁻⁸, 10⁸]. What share of them does fp16 "
            "lose, counting as lost everything above its largest value and everything below "
            "its smallest normal number?"),
    unit="%",
    hint="Measure in decades: log10 of 2⁻¹⁴ and of 65504, against a range 16 decades wide.",
    book_answer="43.75%",
)
def _():
    under, over = pr.log_uniform_loss(1e8, FP16.exp_bits, FP16.man_bits)
    return under + over


@exercise(
    "30.5",
    prompt=("Above which logit x does exp(x) overflow in fp16, and above which in bf16? "
            "Answer as a pair."),
    unit=("", ""),
    hint="exp(x) is finite while x ≤ ln(max).",
)
def _():
    return (pr.softmax_overflow(FP16.exp_bits, FP16.man_bits),
            pr.softmax_overflow(BF16.exp_bits, BF16.man_bits))


@exercise(
    "30.6",
    prompt=("A weight equal to 1.0 is stored in bf16 and receives an update η·g = 10⁻³ every "
            "step. What is the spacing of bf16 numbers at 1.0, and does the update change the "
            "weight (answer with the spacing and yes or no, as a pair)?"),
    unit=("", ""),
    hint="The spacing at 1 is 2^−m; an update smaller than half of it rounds away.",
)
def _():
    gap = pr.spacing(1.0, BF16.exp_bits, BF16.man_bits)
    return gap, bool(1e-3 > gap / 2)


@exercise(
    "30.7",
    prompt=("A tensor's largest magnitude is 0.02. What per-tensor scale maps it onto the "
            "largest value of float8_e4m3fn, and what scale onto the largest of float8_e5m2? "
            "Answer as a pair."),
    unit=("", ""),
    hint="scale = format max / amax: 448 and 57344.",
)
def _():
    return pr.fp8_scale(0.02), pr.fp8_scale(0.02, E5M2.exp_bits, E5M2.man_bits, E5M2.variant)


@exercise(
    "30.8",
    prompt=("4096 independent terms of unit variance are summed one after another, every "
            "partial sum rounded to bf16. By the random-walk model, what is the RMS error of "
            "the result relative to the RMS of the sum?"),
    unit="",
    hint="√n·u/(4√ln 2) with u = 2⁻⁸ for bf16.",
    rtol=0.02,
)
def _():
    return pr.accumulation_error(4096, BF16.man_bits)
