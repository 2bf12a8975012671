"""Run a function on N local processes with gloo, and time things inside them.

The launcher behind every distributed demo of the book (chapter 04 onward).

In a notebook cell, with the worker defined right there::

    import torch
    import torch.distributed as dist
    from dtbook.dist import launch

    def worker(rank, world_size, n):
        x = torch.full((n,), float(rank))
        dist.all_reduce(x)                  # the default group is initialised already
        return x[0].item()

    launch(worker, 4, 8)                    # -> [6.0, 6.0, 6.0, 6.0], index = rank

``launch(fn, world_size, *args, timeout=60.0)`` runs ``fn(rank, world_size, *args)`` on
``world_size`` local processes, each with an initialised gloo default process group, and
returns the per-rank return values (index = rank; results travel back pickled, tensors
included). What a worker prints shows up in the caller (in a notebook, in the cell's
output); what it writes to stderr (warnings, library logs) is kept back, and shown only
when the launch fails (``stderr="show"`` passes it through). If a rank raises, dies or the launch runs past ``timeout`` seconds, every process
the launch started is killed and reaped, and :class:`LaunchError` says which rank failed,
with its traceback (for a timeout: which ranks had not finished, with the Python stack each
was stuck in).

The same worker runs unchanged under ``torchrun`` on a real cluster (NCCL on GPUs, gloo on
CPU). A script ``allreduce.py``::

    import torch
    import torch.distributed as dist
    from dtbook.dist import run_torchrun, device

    def worker(rank, world_size, n):
        x = torch.full((n,), float(rank), device=device())
        dist.all_reduce(x)
        return x[0].item()

    if __name__ == "__main__":
        print(run_torchrun(worker, 8))

runs with ``torchrun --nproc_per_node=4 allreduce.py`` (add ``--nnodes``, ``--node_rank``
and ``--rdzv-endpoint`` for several machines). :func:`run_torchrun` reads ``RANK``,
``WORLD_SIZE`` and ``LOCAL_RANK``, initialises the default group, calls the worker, destroys
the group and returns the worker's result on every rank.

Inside a worker, :func:`timed` measures a step the way the chapters report it: a barrier
before every repeat, and each repeat's time is the slowest rank's.

How a launch starts fast
------------------------
``import torch`` costs about 1.5 s of CPU here, so a launcher that starts fresh interpreters
(``mp.spawn``, ``torchrun``) pays it on every rank of every launch: 5 to 8 s at world size 4
on two cores. Forking the caller would be instant, but a notebook kernel that has already
run torch ops has live OpenMP threads, and a child forked from it can deadlock. So the
first launch starts one helper process per caller, a *zygote*, that imports torch (and
``torch.distributed``, NumPy, cloudpickle) and then never runs a torch op, never starts a
thread: forking it is safe. Each launch asks the zygote to fork ``world_size`` children;
a child sets its thread counts, unpickles the function (shipped by value with cloudpickle,
so a function defined in a notebook cell or in ``__main__`` works), meets the other ranks
through a ``FileStore`` in a temporary directory private to the launch, and calls the
function. There is no port to pick, so two launches at once never collide. (A ``TCPStore``
on port 0 would not collide either, but its connect makes a reverse DNS lookup of the
loopback address, and a resolver that drops one packet stalls it for 5 s.) Gloo's own
sockets use the loopback interface. Before a rank tears its group down it waits, over the
store, for every rank to be done, so a rank that returns at once cannot break a slower
peer's gloo set-up. Results and output come back to the caller over pipes the caller
created and handed to the zygote (SCM_RIGHTS); the zygote reaps the children and reports
each exit, so when :func:`launch` returns or raises, every process it started is gone: no
orphan, no zombie. The zygote exits when its caller does (the caller's end of its socket
closes) and takes its children with it (``PR_SET_PDEATHSIG`` on Linux as well). The first
launch of a session pays the zygote's start (about 1.5 s here); each later launch costs
0.1 to 0.3 s (``benchmarks/launch_overhead.py`` measures it).

``start_method="spawn"`` (or the environment variable ``DTBOOK_DIST_START=spawn``) makes
the zygote start a fresh interpreter per rank instead of forking: slow, but it shares no
state with the zygote; it is the default where ``fork`` is unsafe (macOS). Windows is not
supported (use WSL).

Things a worker inherits, and things it does not: the caller's ``sys.path``, working
directory and environment variables are applied in every worker at each launch; state set
in the caller at run time (``torch.set_default_dtype``, seeds, monkeypatches) is not, as
with any launcher that starts new processes: set it inside the worker. Python's ``random``
and NumPy's global generator are reseeded from the OS in every worker, as in a fresh
process; torch's generator starts from its usual default seed. A worker gets
``max(1, cores // world_size)`` torch threads unless ``threads=`` says otherwise, and one
NumPy BLAS thread.
"""

from __future__ import annotations

import atexit
import math
import numbers
import os
import pickle
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time

from ._launcher import LaunchError, ZygoteUnavailable, _Run, _Zygote  # the process machinery; the error lives there

__all__ = [
    "LaunchError",
    "launch",
    "run_torchrun",
    "device",
    "timed",
    "quartiles",
    "start",
    "shutdown",
]

# Local ranks per launch: each rank's three pipes travel in one SCM_RIGHTS message, which
# Linux caps at 253 descriptors; more than a few dozen CPU processes teach nothing anyway.
MAX_WORLD_SIZE = 64
# select() and poll() take milliseconds in a C int: 2**31 ms is 24.8 days.
MAX_TIMEOUT = 2**31 / 1000 - 60
LaunchError.__module__ = __name__  # shown as dtbook.dist.LaunchError, its public name


# --------------------------------------------------------------------------- validation

def _whole(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    if not (float(value).is_integer() and value >= minimum):
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return int(value)


def _positive_seconds(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return float(value)


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def _default_method():
    return "fork" if sys.platform.startswith("linux") else "spawn"


# --------------------------------------------------------------------------- the zygotes

_ZYGOTES: dict[str, _Zygote] = {}
_ZLOCK = threading.Lock()


def _zygote(method) -> _Zygote:
    with _ZLOCK:
        z = _ZYGOTES.get(method)
        if z is None or not z.alive():
            if z is not None:
                z.close()
            z = _ZYGOTES[method] = _Zygote(method)
        return z


def start(start_method=None) -> float:
    """Start the zygote now instead of at the first launch; return its start-up seconds.

    A chapter may call it in an early cell so that the first demo's timing is clean
    (used from chapter 04 on).
    """
    return _zygote(_method(start_method)).start_seconds


def shutdown():
    """Stop the zygotes (done at exit too). The next launch starts a new one."""
    with _ZLOCK:
        for z in _ZYGOTES.values():
            z.close()
        _ZYGOTES.clear()


atexit.register(shutdown)


def _method(start_method):
    method = start_method or os.environ.get("DTBOOK_DIST_START") or _default_method()
    if method not in ("fork", "spawn"):
        raise ValueError(f"start_method must be 'fork' or 'spawn', got {method!r}")
    if not hasattr(socket, "send_fds"):
        raise NotImplementedError("dtbook.dist.launch needs a POSIX system (on Windows, use WSL)")
    return method


# --------------------------------------------------------------------------- the caller

def launch(fn, world_size, *args, timeout=60.0, threads=None, start_method=None,
           stderr="capture"):
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` local gloo processes.

    Returns the list of the ranks' return values (index = rank). ``fn`` may be defined
    anywhere, a notebook cell included. Each rank has an initialised gloo default process
    group (destroyed when fn returns) and ``threads`` torch threads (default
    ``max(1, cores // world_size)``). ``timeout`` (seconds) counts from the moment the
    workers are started; the zygote's one-time start-up (first launch) is not part of it.

    What a rank prints to stdout shows in the caller. What it writes to stderr (Python
    warnings, library log lines such as gloo's or DTensor's) is kept out of the caller's
    output with ``stderr="capture"`` (the default), so a page shows results, not the
    machinery; a failing rank's :class:`LaunchError` still ends with it, and
    ``LaunchError.logs`` holds every rank's. ``stderr="show"`` passes it through.

    Raises :class:`LaunchError` when a rank raises or dies (the others are killed at
    once) or when the timeout passes; every process the launch started has ended by then.
    Used by every demo from chapter 04 on.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__} ({fn!r})")
    world_size = _whole("world_size", world_size, 1)
    if world_size > MAX_WORLD_SIZE:
        raise ValueError(f"world_size must be at most {MAX_WORLD_SIZE} for local processes, "
                         f"got {world_size}")
    timeout = _positive_seconds("timeout", timeout)
    if timeout > MAX_TIMEOUT:
        raise ValueError(f"timeout must be at most {MAX_TIMEOUT:g} s (about 24 days, the "
                         f"longest wait the system's timers take), got {timeout!r}")
    threads = max(1, _cores() // world_size) if threads is None else _whole("threads", threads, 1)
    method = _method(start_method)
    if stderr not in ("capture", "show"):
        raise ValueError(f"stderr must be 'capture' or 'show', got {stderr!r}")
    import cloudpickle

    try:
        payload = cloudpickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise LaunchError(f"could not pickle fn and its arguments for the workers: "
                          f"{type(exc).__name__}: {exc}") from exc
    rendezvous = tempfile.mkdtemp(prefix="dtbook-launch-")  # private to this launch
    req = {
        "world_size": world_size, "payload": payload, "threads": threads,
        "timeout": timeout, "store": os.path.join(rendezvous, "store"),
        "cwd": os.getcwd(), "sys_path": list(sys.path), "env": dict(os.environ),
        "modules": sorted(m for m in list(sys.modules) if m.startswith("torch.distributed")),
    }
    try:
        for attempt in (1, 2):  # a zygote found broken is replaced once, before any rank ran
            try:
                return _Run(_zygote(method), req, timeout, show_stderr=stderr == "show").go()
            except ZygoteUnavailable as exc:
                if attempt == 2:
                    raise LaunchError(f"the worker factory could not be reached twice: {exc}")
    finally:
        shutil.rmtree(rendezvous, ignore_errors=True)


# --------------------------------------------------------------------------- torchrun

def run_torchrun(fn, *args, backend=None):
    """Run a launch-style worker ``fn(rank, world_size, *args)`` under ``torchrun``.

    Reads ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` from the environment, initialises
    the default process group (``nccl`` when CUDA is available, with this rank's device
    set from ``LOCAL_RANK``; ``gloo`` otherwise; ``backend=`` overrides), calls the worker,
    destroys the group and returns the worker's result. Call it from the script's
    ``if __name__ == "__main__":`` block; see the module docstring. Used from chapter 04 on.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__} ({fn!r})")
    try:
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except KeyError as exc:
        raise RuntimeError(f"run_torchrun needs {exc.args[0]} in the environment: start the "
                           f"script with torchrun (or use dtbook.dist.launch)") from None
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    import torch
    import torch.distributed as dist

    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    try:
        return fn(rank, world_size, *args)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def device():
    """The device a worker's tensors belong on: ``cuda:LOCAL_RANK`` under NCCL, else CPU.

    Lets one worker run under :func:`launch` (gloo, CPU) and under torchrun on GPUs
    (used from chapter 04 on).
    """
    import torch
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


# --------------------------------------------------------------------------- timing

def timed(fn, *args, warmup=3, repeats=10, group=None, reduce="max"):
    """Time ``fn(*args)`` inside a worker; return the list of per-repeat seconds.

    Runs ``warmup`` untimed calls, then ``repeats`` timed ones, each preceded by a barrier
    so every rank starts it together. With ``reduce="max"`` (the default) each repeat's time
    is the slowest rank's (one all_reduce MAX at the end), so every rank returns the same
    list: the time the step took for the group. ``reduce=None`` returns this rank's own
    times. Outside a process group it simply times locally. Under NCCL the device is
    synchronised before each clock reading. The barrier releases ranks within a few tens of
    microseconds of each other, which bounds the resolution for very short steps.
    Used from chapter 04 on.
    """
    warmup = _whole("warmup", warmup, 0)
    repeats = _whole("repeats", repeats, 1)
    if reduce not in ("max", None):
        raise ValueError(f"reduce must be 'max' or None, got {reduce!r}")
    import torch
    import torch.distributed as dist

    grouped = dist.is_available() and dist.is_initialized()
    cuda = grouped and dist.get_backend(group) == "nccl"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(warmup):
        fn(*args)
    sync()
    times = []
    for _ in range(repeats):
        if grouped:
            dist.barrier(group)
        t0 = time.perf_counter()
        fn(*args)
        sync()
        times.append(time.perf_counter() - t0)
    if grouped and reduce == "max":
        t = torch.tensor(times, dtype=torch.float64, device=device() if cuda else "cpu")
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        times = t.tolist()
    return times


def quartiles(times):
    """(first quartile, median, third quartile) of a list of timings (chapter 04 on)."""
    xs = sorted(float(t) for t in times)
    if not xs:
        raise ValueError("times must not be empty")
    if len(xs) == 1:
        return (xs[0], xs[0], xs[0])
    q1, q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return (q1, q2, q3)
