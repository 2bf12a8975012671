"""The process machinery behind :func:`dtbook.dist.launch` (private).

The zygote (the torch-preloaded helper process that forks the ranks), the body of a rank,
the frames and descriptors that pass between the caller, the zygote and the ranks, and
:class:`_Run`, one launch seen from the caller. Why it works this way is told in the
docstring of :mod:`dtbook.dist` ("How a launch starts fast"); the public names live there.

The zygote and a spawned rank start with ``python -c "from dtbook._launcher import ..."``
(``_zygote_main``, ``_spawn_child_main``), so those stay here by name; and this module does
not import :mod:`dtbook.dist` (``dtbook.dist`` imports it). :class:`LaunchError` lives here,
its one home, and ``dtbook.dist`` re-exports it under its public name.
"""

from __future__ import annotations

import codecs
import os
import pickle
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from datetime import timedelta

# Imported by the zygote once, before it forks anything. Every ``torch.distributed``
# module the caller has imported is added at each launch (FSDP, DTensor, pipelining cost
# 0.5 to 1 s each to import, once in the zygote instead of once per rank per launch).
# dtbook.dist is there because workers use it (timed, device): the ranks find it loaded.
PRELOAD = ["torch", "torch.distributed", "numpy", "cloudpickle", "ctypes", "faulthandler",
           "dtbook.dist"]

_FRAME = struct.Struct("!Q")
_KILL_GRACE = 5.0       # seconds to wait for the zygote to report killed children reaped
_DUMP_GRACE = 0.5       # seconds a hung rank gets to print its Python stack on a timeout
_START_TIMEOUT = 180.0  # seconds the zygote may take to import torch on a cold disk
_TAIL = 4000            # characters of a rank's stderr kept for an error message
_OUTPUT_GRACE = 0.5     # seconds to keep reading output after every rank has exited
_POLL = 0.25            # longest the caller sleeps in select() before looking at signals

# Lines of a hung rank's stack dump that name these files are the launcher's own frames,
# left out of the timeout message.
_OWN_FILES = (__file__, os.path.join(os.path.dirname(__file__), "dist.py"))


class LaunchError(RuntimeError):
    """A launch failed: a rank raised or died, or the launch ran past its timeout.

    Attributes: ``rank`` (the first rank that failed, or None for a timeout),
    ``tracebacks`` (rank -> traceback text, for every rank that raised),
    ``timed_out`` (bool), ``pending`` (ranks that had not finished when the timeout hit),
    ``pids`` (the worker processes the launch started, all ended by now),
    ``logs`` (rank -> the end of what that rank wrote to stderr: warnings, library logs).
    """

    def __init__(self, message, *, rank=None, tracebacks=None, timed_out=False,
                 pending=(), pids=(), logs=None):
        super().__init__(message)
        self.logs = dict(logs or {})
        self.rank = rank
        self.tracebacks = dict(tracebacks or {})
        self.timed_out = timed_out
        self.pending = list(pending)
        self.pids = list(pids)


class ZygoteUnavailable(Exception):
    """The zygote could not take a launch (its socket is closed); no rank was started."""


# --------------------------------------------------------------------------- framing

def _frame(obj) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _FRAME.pack(len(data)) + data


def _recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return bytes(buf)


def _recv_frame(sock):
    (n,) = _FRAME.unpack(_recv_exact(sock, _FRAME.size))
    return pickle.loads(_recv_exact(sock, n))


def _split_frames(buf: bytearray):
    """Pop every complete frame off the front of buf."""
    out = []
    while len(buf) >= _FRAME.size:
        (n,) = _FRAME.unpack_from(buf)
        if len(buf) < _FRAME.size + n:
            break
        out.append(pickle.loads(bytes(buf[_FRAME.size:_FRAME.size + n])))
        del buf[:_FRAME.size + n]
    return out


def _split_frame_bytes(buf: bytearray):
    """The payload of one complete frame at the front of buf, or None while incomplete."""
    if len(buf) < _FRAME.size:
        return None
    (n,) = _FRAME.unpack_from(buf)
    if len(buf) < _FRAME.size + n:
        return None
    return bytes(buf[_FRAME.size:_FRAME.size + n])


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# --------------------------------------------------------------------------- the worker

def _loopback_name():
    try:
        for _, name in socket.if_nameindex():
            if name.startswith("lo"):
                return name
    except OSError:
        pass
    return None


def _worker_main(rank, req, res_fd, out_fd, err_fd):
    """Body of one rank, in a fresh child (forked from the zygote, or spawned). Never returns."""
    code = 1
    try:
        if out_fd != 1:
            os.dup2(out_fd, 1)
            os.close(out_fd)
        if err_fd != 2:
            os.dup2(err_fd, 2)
            os.close(err_fd)
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="backslashreplace",
                          closefd=False)
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace",
                          closefd=False)
        code = _worker_body(rank, req, res_fd)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _worker_body(rank, req, res_fd):
    import faulthandler

    signal.signal(signal.SIGINT, signal.default_int_handler)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the stack dump on a timeout
    world_size = req["world_size"]
    blob, code, pg = None, 0, False
    try:
        try:
            os.chdir(req["cwd"])
        except OSError:
            pass
        sys.path[:] = req["sys_path"]
        os.environ.clear()
        os.environ.update(req["env"])
        if not os.environ.get("GLOO_SOCKET_IFNAME") and not os.environ.get("GLOO_SOCKET_IFADDR"):
            lo = _loopback_name()  # local ranks talk over loopback, whatever the hostname says
            if lo:
                os.environ["GLOO_SOCKET_IFNAME"] = lo
        import random

        import numpy as np
        import torch
        import torch.distributed as dist

        random.seed()
        np.random.seed()
        torch.set_num_threads(req["threads"])
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass
        fn, args = pickle.loads(req["payload"])
        # The caller's timeout kills us first; these only stop a rank from waiting forever
        # if the caller is gone.
        limit = timedelta(seconds=req["timeout"] + 30)
        store = dist.FileStore(req["store"], world_size)
        store.set_timeout(limit)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                                timeout=limit)
        pg = True
        try:
            result = fn(rank, world_size, *args)
        except SystemExit as exc:
            if exc.code not in (None, 0):
                raise
            result = None
        import cloudpickle

        try:
            blob = cloudpickle.dumps(("ok", result), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise TypeError(f"the return value of rank {rank} ({type(result).__name__}) cannot "
                            f"be sent back to the caller: it does not pickle ({exc}). Return "
                            f"plain data: numbers, lists, dicts, tensors.") from None
        # The result goes out now, so a rank that returned counts as finished even while it
        # waits for its peers below.
        sys.stdout.flush()
        sys.stderr.flush()
        _write_all(res_fd, _FRAME.pack(len(blob)) + blob)
        os.close(res_fd)
        res_fd = None
        # Exit barrier (over the store, not gloo): no rank tears its sockets down while a
        # peer may still be in init_process_group or reading the rank's last message.
        # Without it a worker that returns at once makes a slower peer's gloo set-up fail
        # with "Connection closed by peer".
        if store.add("dtbook/exit", 1) == world_size:
            store.set("dtbook/exit-done", b"1")
        store.wait(["dtbook/exit-done"])
        pg = False
        if dist.is_initialized():
            dist.destroy_process_group()
    except BaseException as exc:  # report anything, KeyboardInterrupt included
        code = 1
        tb = exc.__traceback__
        while tb.tb_next is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next  # start the traceback at the user's code
        text = "".join(traceback.format_exception(type(exc), exc, tb))
        summary = f"{type(exc).__name__}: {exc}"
        blob = _frame(("err", text, summary))
        try:
            sys.stdout.flush()
        except Exception:
            pass
        if res_fd is not None:  # report first: the caller kills the others right away
            _write_all(res_fd, blob)
            os.close(res_fd)
            res_fd = None
        if pg:
            try:
                import torch.distributed as dist

                dist.destroy_process_group()
            except BaseException:
                pass
    return code


def _set_pdeathsig():
    """Die with the zygote (Linux): a crashed zygote leaves no rank running."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _spawn_child_main():
    """Entry point of a rank started with start_method="spawn" (a fresh interpreter)."""
    data = bytearray()
    while True:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            break
        data += chunk
    rank, fds, req = pickle.loads(bytes(data))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    _set_pdeathsig()
    _worker_main(rank, req, *fds)


# --------------------------------------------------------------------------- the zygote

class _ZLaunch:
    def __init__(self, chan, rendezvous):
        self.chan = chan
        self.rendezvous = rendezvous  # the caller removes it; we do if the caller is gone
        self.pids = {}         # live (unreaped) pid -> rank
        self.listening = True  # the caller's end is open
        self.killed = set()    # pids we had to SIGKILL (they outlived our SIGTERM)
        self.term_at = None    # when we asked the ranks to stop

    def send(self, obj):
        try:
            self.chan.sendall(_frame(obj))
        except OSError:
            self.listening = False

    def kill(self, sig=signal.SIGTERM):
        """Stop the ranks. We stop them with SIGTERM, so that a rank found dead by SIGKILL
        was killed from outside (the out-of-memory killer) and is named as the cause; a
        rank still there a second later gets SIGKILL (see escalate)."""
        if sig == signal.SIGTERM and self.term_at is None:
            self.term_at = time.monotonic()
        for pid in self.pids:  # unreaped, so the pid cannot have been reused
            if sig == signal.SIGKILL:
                self.killed.add(pid)
            try:
                if sig == signal.SIGUSR1:
                    os.kill(pid, sig)  # the stack dump: the rank alone
                else:
                    os.killpg(pid, sig)  # the rank and anything it started
            except OSError:
                pass

    def escalate(self):
        """SIGKILL the ranks that outlived our SIGTERM by a second (a handler caught it)."""
        if self.term_at is not None and self.pids and time.monotonic() - self.term_at > 1.0:
            self.kill(signal.SIGKILL)
            self.term_at = None


def _zygote_main(ctrl_fd, method):
    """The zygote: import torch once, then fork ranks on request. Single-threaded."""
    import importlib

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller decides when ranks stop
    ctrl = socket.socket(fileno=ctrl_fd)
    try:
        if method == "fork":
            for name in PRELOAD:
                importlib.import_module(name)
    except BaseException:
        try:
            ctrl.sendall(b"E" + traceback.format_exc().encode())
        except OSError:
            pass
        return
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    try:
        ctrl.sendall(b"R")
    except OSError:  # the caller is already gone
        os._exit(0)

    launches = []
    owner = {}  # pid -> _ZLaunch
    sel = selectors.DefaultSelector()
    sel.register(ctrl, selectors.EVENT_READ, "ctrl")
    sel.register(wake_r, selectors.EVENT_READ, "wake")

    def reap():
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            zl = owner.pop(pid, None)
            if zl is None:
                continue
            rank = zl.pids.pop(pid)
            try:  # children the rank left behind (a sleep, a pool) end with it
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            code = os.waitstatus_to_exitcode(status)
            zl.send(("exit", rank, pid, code, pid in zl.killed or code == -signal.SIGTERM))
            if not zl.pids:
                if zl.listening:
                    sel.unregister(zl.chan)
                else:
                    shutil.rmtree(zl.rendezvous, ignore_errors=True)
                zl.chan.close()
                launches.remove(zl)

    def open_fds():
        fds = [ctrl.fileno(), wake_r, wake_w]
        fds += [zl.chan.fileno() for zl in launches]
        return fds

    def start_launch(fds):
        for fd in fds:
            os.set_inheritable(fd, False)
        chan, pipe_fds = socket.socket(fileno=fds[0]), fds[1:]
        try:
            chan.settimeout(60)
            req = _recv_frame(chan)
            for name in req.get("modules", ()):
                if name not in sys.modules:
                    try:
                        importlib.import_module(name)
                    except BaseException:
                        pass
            ws = req["world_size"]
            assert len(pipe_fds) == 3 * ws
        except BaseException:
            chan.close()
            for fd in pipe_fds:
                os.close(fd)
            return
        zl = _ZLaunch(chan, os.path.dirname(req["store"]))
        pids = []
        for rank in range(ws):
            mine = (pipe_fds[rank], pipe_fds[ws + rank], pipe_fds[2 * ws + rank])
            if method == "fork":
                pid = os.fork()
                if pid == 0:  # the rank: drop every descriptor that is not its own
                    try:
                        os.setpgid(0, 0)  # its own group: children it starts end with it
                        signal.set_wakeup_fd(-1)
                        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                        for fd in open_fds() + [chan.fileno()] + list(pipe_fds):
                            if fd not in mine:
                                os.close(fd)
                        _set_pdeathsig()
                        if os.getppid() != zygote_pid:
                            os._exit(1)
                        _worker_main(rank, req, *mine)
                    finally:
                        os._exit(1)
                try:  # set in both processes, so a kill never races the child's own call
                    os.setpgid(pid, pid)
                except OSError:
                    pass
            else:
                env = dict(os.environ)
                proc = subprocess.Popen(
                    [sys.executable, "-c",
                     "from dtbook._launcher import _spawn_child_main; _spawn_child_main()"],
                    stdin=subprocess.PIPE, pass_fds=mine, env=env, close_fds=True,
                    process_group=0)
                pid = proc.pid
                try:
                    proc.stdin.write(pickle.dumps((rank, mine, req)))
                    proc.stdin.close()
                except OSError:
                    pass
                proc.returncode = 0  # we reap it ourselves; keep Popen quiet
            pids.append(pid)
            zl.pids[pid] = rank
            owner[pid] = zl
        for fd in pipe_fds:
            os.close(fd)
        chan.settimeout(10)
        launches.append(zl)
        sel.register(chan, selectors.EVENT_READ, zl)
        zl.send(("pids", pids))

    zygote_pid = os.getpid()
    while True:
        waiting = any(zl.term_at is not None for zl in launches)
        for key, _ in sel.select(0.2 if waiting else None):
            if key.data == "wake":
                try:
                    while os.read(wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
            elif key.data == "ctrl":
                try:
                    msg, fds, _, _ = socket.recv_fds(ctrl, 1, 4096)
                except OSError:
                    msg, fds = b"", []
                if not msg:  # the caller is gone or shut us down: take every rank with us
                    for zl in launches:
                        zl.kill(signal.SIGKILL)
                    for pid in list(owner):
                        try:
                            os.waitpid(pid, 0)
                        except ChildProcessError:
                            pass
                    for zl in launches:
                        shutil.rmtree(zl.rendezvous, ignore_errors=True)
                    os._exit(0)  # skip the interpreter's slow teardown of torch
                if fds:
                    start_launch(fds)
            else:
                zl = key.data
                try:
                    data = zl.chan.recv(4096)
                except OSError:
                    data = b""
                if not data:  # the caller abandoned this launch
                    zl.listening = False
                    sel.unregister(zl.chan)
                    zl.kill(signal.SIGKILL)
                elif b"K" in data:
                    zl.kill()
                elif b"D" in data:
                    zl.kill(signal.SIGUSR1)
        reap()
        for zl in launches:
            zl.escalate()


class _Zygote:
    def __init__(self, method):
        self.method = method
        self.broken = False  # set by a launch the zygote failed; it is then replaced
        self.lock = threading.Lock()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env["OPENBLAS_NUM_THREADS"] = "1"  # no BLAS threads in the zygote: forking stays safe
        t0 = time.perf_counter()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c",
                 f"from dtbook._launcher import _zygote_main; _zygote_main({child.fileno()}, "
                 f"{method!r})"],
                pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, env=env, cwd=root,
                start_new_session=True)  # Ctrl-C in a terminal reaches the caller, not us
        finally:
            child.close()
        self.sock = parent
        ready = _readable(parent, _START_TIMEOUT)
        msg = parent.recv(1 << 16) if ready else b""
        if msg != b"R":
            self.close()
            detail = msg[1:].decode(errors="replace") if msg[:1] == b"E" else \
                ("it did not start within %g s" % _START_TIMEOUT if not ready else
                 "it exited during start-up")
            raise LaunchError(f"dtbook.dist could not start its worker factory: {detail}")
        self.start_seconds = time.perf_counter() - t0

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc.poll() is None and not self.broken

    def submit(self, fds):
        with self.lock:
            socket.send_fds(self.sock, [b"L"], fds)

    def close(self):
        try:
            self.sock.close()  # the zygote sees EOF, kills its ranks and exits
        except OSError:
            pass
        if self.broken:  # stopped or stuck: it would not see the EOF; its ranks die with it
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _readable(sock, timeout):
    """Wait up to timeout seconds for sock to have something to read (or EOF)."""
    with selectors.DefaultSelector() as sel:
        sel.register(sock, selectors.EVENT_READ)
        return bool(sel.select(timeout))



# --------------------------------------------------------------------------- the caller

def _short(text, n=160):
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n - 3] + "..."


class _Run:
    """One launch, seen from the caller: pipes in, results and output out."""

    def __init__(self, zygote, req, timeout, show_stderr=False):
        self.zygote, self.req, self.timeout = zygote, req, timeout
        # A rank's stderr (warnings, library logs) is kept, not shown, unless asked for;
        # a failing rank's LaunchError carries the end of it.
        self.show_stderr = show_stderr
        self.ws = req["world_size"]
        self.results = [None] * self.ws
        self.done = [False] * self.ws        # result or error received, or died
        self.errors = {}                     # rank -> (traceback, summary) or None (died)
        self.order = []                      # failing ranks in the order they were seen
        self.exits = {}                      # rank -> exit code (negative: signal)
        self.killed_by_us = set()            # ranks our kill ended while they still ran
        self.returned = set()                # ranks whose result arrived
        self.pids = None
        self.killed = False
        self.timed_out = False
        self.pending = []
        self.capture_only = set()            # ranks whose stderr is kept, not forwarded
        self.tails = {r: "" for r in range(self.ws)}
        self.linebuf = {}
        self.decoders = {}
        self.sel = selectors.DefaultSelector()
        self.chan = None
        self.zygote_gone = False
        self.exited_at = None
        self.fds = []

    # -- set-up ---------------------------------------------------------------------
    def _start(self):
        ends = [[], [], []]  # write ends: results, stdout, stderr
        for kind in range(3):
            for rank in range(self.ws):
                r, w = os.pipe()
                self.fds.append(r)
                ends[kind].append(w)
                os.set_blocking(r, False)
                self.sel.register(r, selectors.EVENT_READ, (kind, rank, bytearray()))
        chan, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.chan = chan
        writes = ends[0] + ends[1] + ends[2]
        try:
            self.zygote.submit([theirs.fileno()] + writes)
            chan.settimeout(max(self.timeout, 10.0))
            chan.sendall(_frame(self.req))
        except OSError as exc:  # the zygote's end is gone: no rank has started
            self.zygote.broken = True
            raise ZygoteUnavailable(str(exc)) from exc
        finally:
            theirs.close()
            for w in writes:
                os.close(w)
        chan.setblocking(False)
        self.chanbuf = bytearray()
        self.sel.register(chan, selectors.EVENT_READ, ("chan", None, None))

    # -- the loop -------------------------------------------------------------------
    def go(self):
        t0 = time.monotonic()
        deadline = t0 + self.timeout
        try:
            self._start()
            grace = None
            while not self._finished():
                now = time.monotonic()
                if grace is None and now >= deadline:
                    self._on_timeout()
                    grace = time.monotonic() + _KILL_GRACE
                    continue
                if grace is None and self.killed:
                    grace = now + _KILL_GRACE
                if grace is not None and now >= grace:
                    break
                wait = (grace if grace is not None else deadline) - now
                if self.exited_at is not None:
                    wait = min(wait, 0.05)  # only stray output left: poll, don't block
                # Wake at least every _POLL seconds: a Ctrl-C that the kernel delivers to
                # another thread (Jupyter's kernels run several) only interrupts this one
                # when it next runs Python code.
                for key, _ in self.sel.select(min(max(wait, 0), _POLL)):
                    self._read(key)
        except BaseException:
            self._kill()
            self._drain(time.monotonic() + _KILL_GRACE)
            raise
        finally:
            self._close()
        if not self._all_exited():
            self._force_kill()
            # The zygote did not report every rank's end in time: it is stopped, stuck or
            # gone. Whatever it does later, it is not trusted with another launch.
            self.zygote.broken = True
        return self._outcome()

    def _finished(self):
        if self.zygote_gone:
            return True
        if not self._all_exited() or not all(self.done):
            return False
        if len(self.sel.get_map()) <= (1 if self.chan_open else 0):
            return True  # every pipe is closed
        # Every rank exited and reported: an output pipe still open is held by a process
        # that escaped the rank's group (setsid); read what is there, then stop waiting.
        if self.exited_at is None:
            self.exited_at = time.monotonic()
        return time.monotonic() - self.exited_at > _OUTPUT_GRACE

    @property
    def chan_open(self):
        try:
            self.sel.get_key(self.chan)
            return True
        except (KeyError, ValueError):
            return False

    def _all_exited(self):
        return self.pids is not None and len(self.exits) == self.ws

    def _drain(self, until):
        while not self._finished() and time.monotonic() < until:
            for key, _ in self.sel.select(min(max(until - time.monotonic(), 0), _POLL)):
                self._read(key)

    def _read(self, key):
        kind, rank, buf = key.data
        if kind == "chan":
            try:
                data = self.chan.recv(1 << 16)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:  # the zygote closes it once every rank is reaped
                self.sel.unregister(self.chan)
                if not self._all_exited():  # ... or it is gone
                    self.zygote_gone = True
                    self._force_kill()
                return
            self.chanbuf += data
            for msg in _split_frames(self.chanbuf):
                if msg[0] == "pids":
                    self.pids = msg[1]
                elif msg[0] == "exit":
                    self.exits[msg[1]] = msg[3]
                    if len(msg) > 4 and msg[4]:
                        self.killed_by_us.add(msg[1])
            return
        fd = key.fd
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        if data:
            if kind == 0:
                buf += data
                frames = _split_frame_bytes(buf)
                if frames is not None:  # the whole result is here: no need to wait for EOF,
                    self.sel.unregister(fd)  # which a child the rank started may hold off
                    self._result(rank, frames)
            else:
                self._output(kind, rank, data)
            return
        self.sel.unregister(fd)  # EOF
        if kind == 0:
            self._result(rank, b"")  # no complete result: the rank died before sending it
        else:
            self._output(kind, rank, b"", eof=True)

    def _result(self, rank, blob):
        self.done[rank] = True
        if not blob:
            if self.killed:  # we stopped it: a consequence, not a cause
                return
            self.errors[rank] = None
        else:
            try:
                msg = pickle.loads(blob)
            except Exception as exc:
                if self.killed:  # cut off mid-write by our kill
                    return
                msg = ("err", f"the result of rank {rank} could not be unpickled in the "
                              f"caller: {type(exc).__name__}: {exc}\n", "unpicklable result")
            if msg[0] == "ok":
                self.results[rank] = msg[1]
                self.returned.add(rank)
                return
            self.errors[rank] = (msg[1], msg[2])
        self.order.append(rank)
        self._kill()  # fail fast: the others would only hang in their next collective

    def _output(self, kind, rank, data, eof=False):
        decoder = self.decoders.get((kind, rank))
        if decoder is None:
            decoder = codecs.getincrementaldecoder("utf-8")("replace")
            self.decoders[(kind, rank)] = decoder
        text = decoder.decode(data, final=eof)
        if kind == 2:
            self.tails[rank] = (self.tails[rank] + text)[-_TAIL:]
            if rank in self.capture_only or not self.show_stderr:
                return
        pending = self.linebuf.get((kind, rank), "") + text
        if eof:
            lines, rest = pending, ""
        else:
            cut = pending.rfind("\n") + 1
            lines, rest = pending[:cut], pending[cut:]
        self.linebuf[(kind, rank)] = rest
        if lines:
            stream = sys.stdout if kind == 1 else sys.stderr
            try:
                stream.write(lines)
                stream.flush()
            except Exception:
                pass

    # -- ending ---------------------------------------------------------------------
    def _send(self, cmd):
        try:
            self.chan.send(cmd)
        except OSError:
            pass

    def _kill(self):
        if not self.killed:
            self.killed = True
            self._send(b"K")

    def _on_timeout(self):
        self.timed_out = True
        self.pending = [r for r in range(self.ws) if not self.done[r]]
        self.capture_only.update(self.pending)
        for r in self.pending:
            self.tails[r] = ""
        self._send(b"D")  # ask the hung ranks for their Python stacks, then kill them
        self._drain(time.monotonic() + _DUMP_GRACE)
        self._kill()

    def _force_kill(self):
        """Last resort when the zygote cannot report: signal the pids ourselves."""
        for pid in self.pids or ():
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass

    def _close(self):
        for fd in self.fds:
            try:
                self.sel.unregister(fd)
            except (KeyError, ValueError):
                pass
            try:
                os.close(fd)
            except OSError:
                pass
        if self.chan is not None:
            self.chan.close()  # the zygote kills whatever is left of this launch
        self.sel.close()

    def _outcome(self):
        ws, pids = self.ws, list(self.pids or ())
        if self.zygote_gone:
            raise LaunchError(f"the zygote (pid {self.zygote.pid}), the process that starts "
                              f"the ranks, died during the launch; its ranks were ended. The "
                              f"next launch starts a new one.", pids=pids)
        # A rank that left on its own (an exit code, or a signal we did not send) is the
        # cause, even when a peer's error arrived first: that peer's collective failed
        # because the rank was gone.
        deaths = [r for r in range(ws) if not self.errors.get(r)
                  and self.exits.get(r) not in (None, 0) and r not in self.killed_by_us
                  and r not in getattr(self, "returned", ())]
        order = deaths + [r for r in self.order if r not in deaths]
        if order:
            first = order[0]
            tracebacks = {r: e[0] for r, e in self.errors.items() if e is not None}
            msg = f"rank {first} of {ws} failed"
            if self.exits.get(first) == -signal.SIGKILL and first not in self.killed_by_us:
                msg += (" (killed by SIGKILL from outside the launch: the out-of-memory killer "
                        "sends this signal)")
            if self.errors.get(first):
                msg += ":\n\n" + self.errors[first][0].rstrip()
                if self.tails[first].strip():
                    msg += (f"\n\nThe end of rank {first}'s stderr:\n"
                            f"{self.tails[first].rstrip()}")
            else:
                msg += self._death(first)
            others = order[1:]
            if others:
                msg += "\n\nAlso failed, probably as a consequence: " + "; ".join(
                    f"rank {r} ({_short(self.errors[r][1]) if self.errors.get(r) else 'died'})"
                    for r in others)
            raise LaunchError(msg, rank=first, tracebacks=tracebacks, pids=pids,
                              logs=self._logs())
        if self.timed_out and self.pids is None:
            raise LaunchError(f"launch timed out after {self.timeout:g} s: the worker factory "
                              f"(pid {self.zygote.pid}) did not start the ranks; it was stopped "
                              f"or stuck, and the next launch starts a new one",
                              timed_out=True, pending=list(range(ws)))
        if self.timed_out:
            finished = [r for r in range(ws) if r not in self.pending]
            msg = (f"launch timed out after {self.timeout:g} s: "
                   + (f"rank(s) {self.pending} of {ws} were still running"
                      if self.pending else "every rank had returned, but the launch did not end")
                   + (f"; rank(s) {finished} had returned their results" if finished and
                      self.pending else ""))
            for r in self.pending:
                stack = "\n".join(line for line in self.tails[r].rstrip().splitlines()
                                  if not any(f in line for f in _OWN_FILES)
                                  and '"<string>"' not in line)
                if stack.strip():
                    msg += f"\n\nrank {r} was here when it was stopped:\n{stack}"
            raise LaunchError(msg, timed_out=True, pending=self.pending, pids=pids,
                              logs=self._logs())
        missing = [r for r in range(ws) if not self.done[r]]
        if missing:  # the zygote vanished
            raise LaunchError(f"ranks {missing} ended without a result (the worker factory "
                              f"exited unexpectedly)", pids=pids)
        return self.results

    def _logs(self):
        return {r: t for r, t in self.tails.items() if t.strip()}

    def _death(self, rank):
        code = self.exits.get(rank)
        if code is None:
            how = "ended"
        elif code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        msg = f": the process {how} without returning a result"
        if self.tails[rank].strip():
            msg += f"; the end of its stderr:\n{self.tails[rank].rstrip()}"
        return msg

