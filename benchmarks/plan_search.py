"""Time dtbook.plan.search over the whole layout space of Llama 3 405B on 16,384 H100s.

Every TP/PP/DP/CP split, ZeRO stage, recompute mode, micro-batch and virtual-stage count
(chapter 27). Prints the candidates, the survivors and the fastest of 5 timed runs.
Usage: .venv/bin/python benchmarks/plan_search.py
"""

import time

from dtbook import plan

ARGS = dict(gpus=16384, global_batch=2048, seq=8192, gpu="h100-sxm")


def main():
    stages = plan.funnel("llama3-405b", **ARGS)
    plan.search("llama3-405b", **ARGS)  # warm-up (imports, first NumPy calls)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        best = plan.search("llama3-405b", **ARGS, top=10)
        times.append(time.perf_counter() - t0)
    first, survivors = next(iter(stages.values())), list(stages.values())[-1]
    print(f"llama3-405b on 16,384 H100: {first:,} candidates, {survivors:,} feasible; "
          f"search {min(times):.3f} s (fastest of 5)")
    c = best[0].config
    print(f"best: tp {c['tp']} pp {c['pp']} dp {c['dp']} cp {c['cp']} vpp {c['vpp']} "
          f"mb {c['micro_batch']} zero {c['zero']} recompute {c['recompute']}: "
          f"{best[0].step_time:.2f} s/step, MFU {best[0].mfu:.1%}")


if __name__ == "__main__":
    main()
