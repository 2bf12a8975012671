"""Exercises for chapter 17, Sequence Parallelism from Decomposability."""

from dtbook import activations, models
from dtbook import sequence_parallel as sq
from dtbook.exercises import exercise
from dtbook.units import ms

K = 1024


@exercise(
    "17.1",
    prompt=("A layer with H = 4096 and 32 heads runs on a sequence of 256K = 262,144 tokens, "
            "batch 1, bf16. How large is its attention matrix, materialised whole, and how "
            "large is the block of scores each rank holds under ring attention over P = 8 "
            "ranks? Answer as a pair."),
    unit=("TB", "GB"),
    hint="b·n_h·S²·s bytes; each rank holds S/P queries against S/P keys at a time.",
    book_answer=("4.4 TB", "68.7 GB"),
)
def _():
    S = 256 * K
    return (activations.attention_scores_bytes(1, S, 32, value_bytes=2),
            activations.attention_scores_bytes(1, S / 8, 32, value_bytes=2))


@exercise(
    "17.2",
    prompt=("S = 1M = 1,048,576 tokens, H = 8192, batch 1, bf16, P = 16 ranks. How many bytes "
            "does one rank send per layer in the forward pass with ring attention (K and V "
            "passed P − 1 times) and with Ulysses (four all-to-alls)? Answer as a pair."),
    unit=("GB", "GB"),
    hint="Ring: (P − 1)·2b(S/P)H·s. Ulysses: each all-to-all sends (P − 1)/P of the rank's "
         "b(S/P)H·s buffer, four times. Their ratio is P/2.",
    book_answer=("32.2 GB", "4.03 GB"),
)
def _():
    S = 1024 * K
    return (sq.ring_kv_bytes(1, S, 8192, 16, value_bytes=2),
            sq.ulysses_bytes(1, S, 8192, 16, value_bytes=2))


@exercise(
    "17.3",
    prompt=("Ring attention on P = 8 ranks: each block takes 10 ms to compute and each K/V "
            "transfer 2 ms; a rank computes P blocks and receives P − 1. How long is the "
            "pass with every transfer overlapped with the block in hand, and how long with "
            "none overlapped? Answer as a pair."),
    unit=("ms", "ms"),
    hint="Overlapped: T_comp + (P − 1)·max(T_comp, T_comm). Sequential: P·T_comp + "
         "(P − 1)·T_comm.",
    book_answer=("82 ms", "96 ms"),
    book_note=("The original edition gets 82 ms overlapped, charging one first transfer that "
               "cannot be hidden, and 96 ms without overlap, charging P = 8 transfers (a 1.17× "
               "gain, 2.4% overhead). A rank starts on its own K/V block, so no transfer comes "
               "before the first block, and it needs the K/V of the P − 1 others: 7 transfers, "
               "each hidden behind one of the first 7 blocks (2 ms < 10 ms). The overlapped pass"
               " is 80 ms, no overhead at all, and the sequential one 94 ms (1.175×)."),
)
def _():
    return sq.ring_time(10 * ms, 2 * ms, 8), sq.ring_time(10 * ms, 2 * ms, 8, overlap=False)


@exercise(
    "17.4",
    prompt=("Causal ring attention on P = 8 ranks, skipping every block whose keys all lie "
            "after its queries. With the contiguous split, how many blocks does a rank "
            "compute on average, and how much faster is the pass than without skipping (the "
            "busiest rank sets the pace)? With the zig-zag split (16 chunks, rank r holds "
            "chunks r and 15 − r, skipping at chunk granularity), how much faster? Answer as "
            "a triple."),
    unit=("", "", ""),
    hint="Contiguous: rank r needs r + 1 blocks, the last needs all 8. Zig-zag: every rank "
         "computes 2P + 1 chunk pairs of a quarter block each.",
    book_answer=(4.5, 1.78, None),
    book_note=("The original edition counts (P − 1)/2 = 3.5 skippable steps on average and "
               "calls the result 1.78× faster (8/4.5). That average is the work saved, "
               "43.75%, but with the contiguous split the last rank still computes all 8 "
               "blocks and every other rank waits for it, so the pass is no faster (1×). "
               "A balanced split is needed to turn the saved work into time: the zig-zag "
               "split gives each rank (2P + 1)/4 = 4.25 blocks, 1.88×."),
)
def _():
    return (sq.causal_steps_needed(8), 8 / sq.causal_blocks(8),
            8 / sq.causal_blocks(8, zigzag=True))


@exercise(
    "17.5",
    prompt=("One attention head, d = 128, S = 1M = 1,048,576 tokens over P = 8 ranks, bf16. "
            "How large is the block of scores a rank would materialise in one ring step, "
            "and how large is its attention state with a flash kernel inside each step "
            "(Q, K, V and output of its tokens, plus two K/V blocks in flight, 8(S/P)d "
            "values)? And their ratio? Answer as a triple."),
    unit=("GB", "MB", ""),
    hint="(S/P)²·s against 8(S/P)·d·s: the ratio is (S/P)/(8d).",
    book_answer=("32 GB", "200 MB", 1024),
    book_note=("The original edition prints 32 GB against about 200 MB and calls the "
               "reduction (S/P)/d = 1024. The block is (S/P)²·2 bytes = 34.4 GB (32 GiB), "
               "the state 8(S/P)d·2 bytes = 268 MB, and their ratio (S/P)/(8d) = 128: the "
               "1024 drops the 8 tensors of S/P × d the state holds."),
)
def _():
    S = 1024 * K
    block = activations.attention_scores_bytes(1, S / 8, 1, value_bytes=2)
    state = sq.flash_ring_bytes(S, 128, 8, value_bytes=2)
    return block, state, block / state


@exercise(
    "17.6",
    prompt=("Megatron sequence parallelism with t = 8, one sequence of S = 8192 tokens, "
            "H = 8192, bf16. Per layer and forward pass, how many bytes does a rank send "
            "(two all-gathers and two reduce-scatters), and how many bytes of LayerNorm and "
            "dropout activations (2bSH values without SP) does each rank keep with SP? "
            "Answer as a pair."),
    unit=("MB", "MB"),
    hint="4(t − 1)/t·bSH·s, the same as tensor parallelism's two all-reduces; the "
         "activations shrink by t.",
)
def _():
    return (sq.megatron_sp_bytes(1, 8192, 8192, 8, value_bytes=2),
            sq.norm_activation_bytes(1, 8192, 8192, 8, value_bytes=2, sequence_parallel=True))


@exercise(
    "17.7",
    prompt=("Ulysses gives every rank whole heads. Llama 3 70B has 64 query heads and 8 "
            "key/value heads. What is the largest Ulysses degree at which every rank "
            "holds whole K/V heads, without copying any?"),
    unit="",
    hint="The degree must divide the number of K/V heads.",
)
def _():
    return models.get("llama3-70b").kv_heads
