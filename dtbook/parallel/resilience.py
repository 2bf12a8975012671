"""Fault-tolerant data parallelism with torchft, on one machine (chapter 26).

:func:`run` starts a torchft lighthouse on 127.0.0.1 and two replica groups of one process
each, which train a small model by data parallelism. Replica 1 kills itself with SIGKILL in
the middle of a step (after its backward, before its all-reduce); replica 0 finishes that
step without committing it, and goes on alone in a quorum of one. A replacement replica
then starts from different weights, joins the quorum and heals: it copies the live
replica's model, optimizer state and step over torchft's checkpoint transport, and the two
train together to the end. Every replica writes one line per attempted step (step, quorum
size, whether the step was committed, a SHA-256 of its weights when the step began), which
:func:`run` returns for the chapter to assert on.

How the processes start: a ``forkserver`` imports torch and torchft once, and every replica
is forked from it (an import costs seconds on a busy machine; a fork does not). The
lighthouse runs in the caller's process. Nothing outlives :func:`run`: it kills whatever is
still running when it returns or raises, stops the fork server, and each replica also ends
itself at its deadline.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import threading
import time

from .data_parallel import parameters_hash

__all__ = ["run", "replica", "batch", "make_model", "Momentum"]

_WIDTH = 16
# The lighthouse declares a replica dead after this long without its heartbeat (seconds).
# Shorter ends the demo sooner, but a replica stalled that long on a busy machine would be
# dropped from a quorum although it lives; 5 s leaves a busy 2-core machine room.
HEARTBEAT_TIMEOUT = 5.0


def make_model(seed):
    """The small model every replica trains (chapter 26): 8 → 16 → 1 with tanh."""
    import torch
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, _WIDTH), torch.nn.Tanh(), torch.nn.Linear(_WIDTH, 1))


def batch(step, replica_rank):
    """The batch replica ``replica_rank`` of the quorum trains on at ``step`` (chapter 26):
    a function of both, so a replayed run sees the same data."""
    import torch
    g = torch.Generator().manual_seed(1000 * step + replica_rank)
    x = torch.randn(16, 8, generator=g)
    return x, x[:, :1] * 2 - x[:, 1:2]


class Momentum:
    """SGD with momentum, b ← μb + g, w ← w − ηb (chapter 26), written out because the first
    use of ``torch.optim`` imports ``torch._dynamo``: seconds per process on a busy machine.
    Its state (the buffers b) heals with the model."""

    def __init__(self, params, lr=0.05, mu=0.9):
        import torch
        self.params, self.lr, self.mu = list(params), lr, mu
        self.buffers = [torch.zeros_like(p) for p in self.params]

    def step(self):
        import torch
        with torch.no_grad():
            for p, b in zip(self.params, self.buffers):
                b.mul_(self.mu).add_(p.grad)
                p.add_(b, alpha=-self.lr)

    def state_dict(self):
        return {"buffers": [b.clone() for b in self.buffers]}

    def load_state_dict(self, state):
        for b, saved in zip(self.buffers, state["buffers"]):
            b.copy_(saved)


def _touch(path):
    open(path, "w").close()


def _stop_fork_server():
    # multiprocessing keeps its fork server until the interpreter exits; this run leaves no
    # process behind, so stop it (a private method, there since Python 3.7: skip if gone)
    from multiprocessing import forkserver
    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if stop is not None:
        stop()


def _wait_for(paths, deadline):
    while not all(os.path.exists(p) for p in paths):
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited for {paths}")
        time.sleep(0.01)


def replica(name, lighthouse, folder, steps, die_at, pause_at, seed, seconds):
    """One replica group of one process (chapter 26): train until the quorum's step reaches
    ``steps``. ``die_at``: the step at which this replica SIGKILLs itself mid-step (-1:
    never). ``pause_at``: after committing this step, ask for the replacement and wait until
    it has asked to join (-1: never; it keeps the demo short and its steps alone countable,
    a real survivor trains on). ``seconds``: the deadline."""
    import torch
    from datetime import timedelta
    from torchft import Manager
    from torchft.process_group import ProcessGroupGloo

    deadline, began = time.monotonic() + seconds, time.time()
    threading.Timer(seconds, os._exit, (3,)).start()  # never outlive the demo
    noise = os.open(os.path.join(folder, f"{name}.out"), os.O_WRONLY | os.O_CREAT)
    os.dup2(noise, 1); os.dup2(noise, 2)                # torchft's logs go to a file, not the page

    torch.set_num_threads(1)
    model = make_model(seed)
    opt = Momentum(model.parameters())
    store = torch.distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    wait = timedelta(seconds=seconds)
    manager = Manager(
        pg=ProcessGroupGloo(timeout=wait), min_replica_size=1, use_async_quorum=False,
        load_state_dict=lambda s: (model.load_state_dict(s["model"]), opt.load_state_dict(s["optim"])),
        state_dict=lambda: {"model": model.state_dict(), "optim": opt.state_dict()},
        replica_id=name, rank=0, world_size=1, store_addr="127.0.0.1", store_port=store.port,
        lighthouse_addr=lighthouse, hostname="127.0.0.1",
        timeout=wait, quorum_timeout=wait, connect_timeout=wait)
    _touch(os.path.join(folder, f"up.{name}"))   # heartbeating from here on
    if name in ("0", "1"):      # the first two start together: both in the first quorum
        _wait_for([os.path.join(folder, f"up.{r}") for r in ("0", "1")], deadline)
    log = open(os.path.join(folder, f"{name}.jsonl"), "w")
    log.write(json.dumps({"began": began, "up": time.time()}) + "\n")
    flat_grad = torch.zeros(sum(p.numel() for p in model.parameters()))
    if name == "2":   # say "asking" when our quorum request has most likely reached the
        # lighthouse; if it has not, the survivor trains a step more alone (counted, allowed)
        threading.Timer(0.2, _touch, (os.path.join(folder, "asking.2"),)).start()
    while manager.current_step() < steps:
        # synchronous: a healing replica loads the live weights here
        manager.start_quorum()
        step, rank = manager.current_step(), manager.participating_rank()
        weights = parameters_hash(model)
        x, y = batch(step, rank)
        loss = (model(x) - y).square().mean()
        model.zero_grad()
        loss.backward()
        if step == die_at:  # dies mid-step, before its all-reduce
            os.kill(os.getpid(), signal.SIGKILL)
        grads = [p.grad.flatten() for p in model.parameters()]
        torch.cat(grads, out=flat_grad)
        # the average over this step's quorum
        manager.allreduce(flat_grad).wait()
        committed = manager.should_commit()
        if committed:
            offset = 0
            for p in model.parameters():
                part = flat_grad[offset:offset + p.numel()]
                p.grad.copy_(part.view_as(p))
                offset += p.numel()
            opt.step()
        log.write(json.dumps({"step": step, "rank": rank, "quorum": manager.num_participants(),
                              "committed": committed, "weights": weights,
                              "loss": loss.item(), "t": time.time()}) + "\n")
        log.flush()
        if committed and step == pause_at:      # `alone` steps done alone: call the replacement
            _touch(os.path.join(folder, "alone.0"))
            _wait_for([os.path.join(folder, "asking.2")], deadline)
    log.write(json.dumps({"final": parameters_hash(model),
                          "state": [p.detach().tolist() for p in model.parameters()]}) + "\n")
    log.close()
    manager.shutdown(wait=False)
    os._exit(0)   # skip torch's slow interpreter teardown; the log is closed


def run(steps=14, die_at=4, alone=3, timeout=90.0):
    """Run the kill-and-heal demo (chapter 26) and return ``{name: records}`` for the
    replicas "0" (survives), "1" (SIGKILLed at ``die_at``) and "2" (the replacement), plus
    "exit" (each replica's exit code; None if it had to be killed at the deadline), "pids",
    "seconds" (wall-clock of the demo), "lighthouse" (its address) and "logs" (the end of
    each replica's own output, torchft's log included: what to read when an assert fails).
    Replica 0 asks for the replacement after ``alone`` committed steps on its own.

    Side effects: sets ``RUST_LOG=error`` in this process's environment unless it is set
    (torchft's Rust side logs every quorum otherwise). No process outlives the call: not
    the replicas, and not the fork server."""
    import multiprocessing as mp
    os.environ.setdefault("RUST_LOG", "error")   # torchft's Rust side logs every quorum at INFO
    from torchft._torchft import LighthouseServer

    start, began = time.perf_counter(), time.time()
    folder = tempfile.mkdtemp(prefix="dtbook-torchft-")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__, "torch", "torchft"])
    # a replica that is up but has not asked for a quorum is waited for up to the deadline
    lighthouse = LighthouseServer(bind="127.0.0.1:0", min_replicas=1,
                                  join_timeout_ms=int(timeout * 1000),
                                  heartbeat_timeout_ms=int(HEARTBEAT_TIMEOUT * 1000))
    address = "http://127.0.0.1:" + lighthouse.address().rsplit(":", 1)[1]
    try:                                       # no folder outlives the call, whatever fails
        procs = {}
        try:
            def start_replica(name, die, pause, seed):
                p = ctx.Process(target=replica, args=(name, address, folder, steps, die, pause, seed,
                                                       timeout), daemon=True)
                p.start()
                procs[name] = p
            start_replica("0", -1, die_at + alone - 1, 0)
            start_replica("1", die_at, -1, 0)
            procs["1"].join(timeout)
            _wait_for([os.path.join(folder, "alone.0")], time.monotonic() + timeout)
            start_replica("2", -1, -1, 1)          # other initial weights: healing must fix them
            for name in ("0", "2"):
                procs[name].join(max(1.0, timeout - (time.perf_counter() - start)))
        finally:
            for p in procs.values():
                if p.is_alive():
                    p.kill()
                    p.join(5)
            lighthouse.shutdown()
            _stop_fork_server()
        out = {"exit": {n: p.exitcode for n, p in procs.items()},
               "seconds": time.perf_counter() - start, "began": began, "lighthouse": address,
               "logs": {}, "pids": {n: p.pid for n, p in procs.items()}}
        for name in procs:
            path = os.path.join(folder, f"{name}.jsonl")
            out[name] = [json.loads(line) for line in open(path)] if os.path.exists(path) else []
            path = os.path.join(folder, f"{name}.out")
            if os.path.exists(path):
                out["logs"][name] = open(path, errors="replace").read()[-3000:]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return out
