"""Exercises for chapter 05, The Economics of Compute.

Peak compute is the catalog's dense BF16 figure for an H100 SXM (989.4 TFLOP/s); the original edition
writes ~989, which moves no answer outside the 1% tolerance. Prices are the inputs each
prompt states (the original edition's 2024–25 figures), not market data.
"""

from dtbook import cost, flops, hardware
from dtbook.exercises import exercise
from dtbook.units import TFLOP, hour

H100 = hardware.get("h100-sxm")
F = H100.peak("bf16")
_F = f"{F / TFLOP:g} TFLOP/s"


@exercise(
    "05.1",
    prompt=(f"A 70B-parameter model is trained on 2T tokens on H100s ({_F} dense BF16) at 45% "
            "MFU, rented at $4 per GPU-hour. How many GPU-hours does the run take, and what "
            "does it cost? Answer as a tuple (GPU-hours, dollars)."),
    unit=("GPU-hours", "$"),
    hint=("6ΨD FLOP in all; one GPU delivers F·η·3600 FLOP per hour; GPU-hours times the "
          "price is the bill."),
    book_answer=(525_000, "$2.10M"),
)
def _():
    return (cost.device_hours(70e9, 2e12, F, 0.45),
            cost.run_cost(70e9, 2e12, F, 4.0, 0.45))


@exercise(
    "05.2",
    prompt=("The same training run can use (a) 512 GPUs at 50% MFU or (b) 1024 GPUs at 35% "
            "MFU, at the same price per GPU-hour. How many times the cost of (a) is the cost "
            "of (b)?"),
    unit="",
    hint="Cost is GPU-hours times price, and GPU-hours are 6ΨD/(F·MFU): the GPU count cancels.",
    book_answer=1.43,
)
def _():
    return (cost.run_cost(70e9, 2e12, F, 4.0, 0.35) / cost.run_cost(70e9, 2e12, F, 4.0, 0.50))


@exercise(
    "05.3",
    prompt=("Spot H100s cost $1.50/h, on-demand $4/h. You checkpoint every hour of work, and "
            "checkpointing costs 5% of the time. Each preemption loses half an interval of "
            "work on average. Above what preemption rate (per hour) does spot stop being "
            "cheaper? Use the first-order model m = (1 + o)/(1 − λc/2) for spot; on-demand "
            "instances are never preempted and are taken not to checkpoint, so they pay no "
            "overhead. Answer in preemptions per hour (\"1.2/h\", or a bare number)."),
    unit="/h",
    hint="Set 1.50 × m(λ) equal to 4 and solve for λ, with c = 1 hour and o = 0.05.",
    book_answer=1.22,
)
def _():
    return cost.breakeven_failure_rate(1.5, 4.0, hour, 0.05)  # per second; shown per hour


@exercise(
    "05.4",
    prompt=("With the same hourly checkpoints and 5% checkpoint overhead, what cost multiplier "
            "does the first-order model give at preemption rates of 5%, 20% and 50% per hour? "
            "Answer as a tuple of three multipliers."),
    unit=("", "", ""),
    hint="m = (1 + o) / (1 − λc/2) with o = 0.05, c = 1 h, λ in preemptions per hour.",
    book_answer=(1.08, 1.17, 1.40),
)
def _():
    return tuple(cost.failure_multiplier(rate / hour, hour, 0.05) for rate in (0.05, 0.20, 0.50))


@exercise(
    "05.5",
    prompt=("An H100 bought and run on-premises costs $55k over its life (total cost of "
            "ownership); renting one costs $4/h. If the owned GPU is busy 50% of the time, "
            "after how many years has it paid for itself against renting only the hours you "
            "use?"),
    unit="years",
    hint="TCO / price is the break-even in busy hours; at 50% utilisation the calendar time doubles.",
    book_answer="3 years",
    book_note=("The original edition rounds: 13,750 busy hours at 50% is 27,500 hours of "
               "calendar time, 3.14 years (37.6 months), which it prints as '~3 years'."),
)
def _():
    return cost.breakeven_time(55e3, 4.0, utilization=0.5)


@exercise(
    "05.6",
    prompt=("For the run of exercise 05.1 (70B, 2T tokens, $4/h, 45% MFU), how many dollars "
            "does raising MFU by one point, to 46%, save?"),
    unit="$",
    hint="cost(η) − cost(η + 0.01) = cost(η) · 0.01 / (η + 0.01).",
)
def _():
    return cost.mfu_point_value(70e9, 2e12, F, 4.0, 0.45, 0.01)


@exercise(
    "05.7",
    prompt=("DeepSeek-V3 (37B parameters active per token) was pre-trained on 14.8T tokens in "
            "2.664M H800 GPU-hours, as its technical report states. Take the H800's dense BF16 "
            f"peak to be the H100 SXM's {_F} (the two differ in interconnect, not in "
            "compute). What MFU does 6·Ψ_active·D imply, against that BF16 peak? Answer in %."),
    unit="%",
    hint="MFU = 6ΨD / (GPU-hours × 3600 × F). Use the active parameters: an MoE token only "
         "visits its experts.",
)
def _():
    ds = cost.DEEPSEEK_V3
    achieved = flops.training_flops(ds["active_params"], ds["tokens"]) / (ds["pretraining_gpu_hours"] * hour)
    return achieved / F
