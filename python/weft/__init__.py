"""weft from Python: a communicator from the environment (weftrun,
torchrun, mpirun, srun), collectives on any buffer-protocol object (NumPy
arrays, bytearray, array.array), and the parameter-server client.
``import weft.torch`` registers the torch.distributed backend "weft".
weft.Run is a training run (weft-train's, any layout) driven from Python.

    import numpy as np, weft
    with weft.Comm() as c:
        x = np.full(4, c.rank, dtype=np.float32)
        c.allreduce(x)              # in place; op="sum" | "prod" | "min" | "max" | "avg"
"""
import ctypes

from ._lib import lib

__all__ = ["Comm", "PS", "Run", "WeftError", "version"]

DTYPES = {"f32": 0, "f64": 1, "f16": 2, "bf16": 3, "i8": 4, "u8": 5, "i32": 6, "i64": 7}
OPS = {"sum": 0, "prod": 1, "min": 2, "max": 3, "avg": 4}
_SIZES = {0: 4, 1: 8, 2: 2, 3: 2, 4: 1, 5: 1, 6: 4, 7: 8}
# struct-module formats (what memoryview reports, NumPy included)
_FORMATS = {"f": 0, "d": 1, "e": 2, "b": 4, "B": 5, "c": 5, "?": 5}
_INTS = {("i", 4): 6, ("l", 4): 6, ("q", 8): 7, ("l", 8): 7, ("n", 8): 7,
         ("I", 4): 6, ("L", 8): 7, ("Q", 8): 7}


class WeftError(RuntimeError):
    """A weft call failed; .code is the WEFT_E* value, the message weft's own
    (it names the peer, the operation and the cause)."""

    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


def version():
    return lib.weft_version().decode()


def _view(buf, dtype, writable):
    """(address, element count, dtype code, keep-alive) of a contiguous buffer."""
    mv = memoryview(buf)
    if not mv.c_contiguous:
        raise ValueError("weft: the buffer must be C-contiguous")
    if dtype is None:
        fmt = mv.format.lstrip("@=<")
        code = _FORMATS.get(fmt, _INTS.get((fmt, mv.itemsize)))
        if code is None:
            raise TypeError(f"weft: element format {mv.format!r} has no weft dtype; "
                            "pass dtype= one of " + ", ".join(DTYPES))
    else:
        code = DTYPES[dtype] if isinstance(dtype, str) else int(dtype)
    nbytes = mv.nbytes
    if mv.readonly:
        if writable:
            raise ValueError("weft: the output buffer is read-only")
        keep = ctypes.create_string_buffer(mv.tobytes(), nbytes)
        addr = ctypes.addressof(keep)
    else:
        keep = (ctypes.c_char * nbytes).from_buffer(mv.cast("B"))
        addr = ctypes.addressof(keep)
    return addr, nbytes // _SIZES[code], code, keep


class Comm:
    """A weft communicator. Comm() reads rank, size and the store's address
    from the environment as weft_comm_init_env does."""

    def __init__(self, _handle=None):
        if _handle is None:
            h = ctypes.c_void_p()
            rc = lib.weft_comm_init_env(ctypes.byref(h))
            if rc:
                raise WeftError(rc, "weft: init from the environment failed: " +
                                lib.weft_strerror(rc).decode())
            _handle = h
        self._c = _handle

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self._c:
            rc = lib.weft_comm_destroy(self._c)
            self._c = None
            if rc:
                raise WeftError(rc, "weft: destroy: " + lib.weft_strerror(rc).decode())

    def abort(self):
        lib.weft_comm_abort(self._c)

    @property
    def rank(self):
        return lib.weft_comm_rank(self._c)

    @property
    def size(self):
        return lib.weft_comm_size(self._c)

    def _check(self, rc, what):
        if rc:
            msg = lib.weft_comm_error(self._c) or b""
            raise WeftError(rc, f"weft: {what}: {msg.decode() or lib.weft_strerror(rc).decode()}")

    def split(self, color, key=0):
        h = ctypes.c_void_p()
        self._check(lib.weft_comm_split(self._c, color, key, ctypes.byref(h)), "split")
        return Comm(h) if h.value else None

    def barrier(self):
        self._check(lib.weft_barrier(self._c), "barrier")

    def broadcast(self, buf, root=0, dtype=None):
        a, n, t, _k = _view(buf, dtype, True)
        self._check(lib.weft_broadcast(self._c, a, n, t, root), "broadcast")

    def allreduce(self, buf, out=None, op="sum", dtype=None):
        """Reduces buf over the ranks into out (default: buf, in place)."""
        a, n, t, _k = _view(buf, dtype, out is None)
        b, m, _t, _l = _view(out, dtype, True) if out is not None else (a, n, t, None)
        if m != n:
            raise ValueError("weft: allreduce: out must match buf's size")
        self._check(lib.weft_allreduce(self._c, a, b, n, t, OPS[op]), "allreduce")

    def reduce(self, buf, out=None, op="sum", root=0, dtype=None):
        a, n, t, _k = _view(buf, dtype, out is None and self.rank == root)
        b = _view(out, dtype, True)[0] if out is not None else (a if self.rank == root else None)
        self._check(lib.weft_reduce(self._c, a, b, n, t, OPS[op], root), "reduce")

    def allgather(self, buf, out, dtype=None):
        """out holds size times buf's elements, rank r's at block r."""
        a, n, t, _k = _view(buf, dtype, False)
        b, m, _t, _l = _view(out, dtype, True)
        if m != n * self.size:
            raise ValueError("weft: allgather: out must hold size * len(buf) elements")
        self._check(lib.weft_allgather(self._c, a, b, n, t), "allgather")

    def gather(self, buf, out=None, root=0, dtype=None):
        a, n, t, _k = _view(buf, dtype, False)
        b = _view(out, dtype, True)[0] if out is not None else None
        self._check(lib.weft_gather(self._c, a, b, n, t, root), "gather")

    def scatter(self, buf, out, root=0, dtype=None):
        b, n, t, _l = _view(out, dtype, True)
        a = _view(buf, dtype, False)[0] if buf is not None else None
        self._check(lib.weft_scatter(self._c, a, b, n, t, root), "scatter")

    def reduce_scatter(self, buf, out, op="sum", dtype=None):
        a, n, t, _k = _view(buf, dtype, False)
        b, m, _t, _l = _view(out, dtype, True)
        self._check(lib.weft_reduce_scatter(self._c, a, b, m, t, OPS[op]), "reduce_scatter")

    def alltoall(self, buf, out, send_counts=None, recv_counts=None, dtype=None):
        """Equal blocks, or with send_counts/recv_counts (elements per rank,
        blocks back to back) unequal ones."""
        a, n, t, _k = _view(buf, dtype, False)
        b, m, _t, _l = _view(out, dtype, True)
        if send_counts is None:
            self._check(lib.weft_alltoall(self._c, a, b, n // self.size, t), "alltoall")
            return
        arr = ctypes.c_size_t * self.size

        def displs(counts):
            d, at = [], 0
            for x in counts:
                d.append(at)
                at += x
            return arr(*d)
        sc, rc = arr(*send_counts), arr(*recv_counts)
        self._check(lib.weft_alltoallv(self._c, a, sc, displs(send_counts), b, rc,
                                       displs(recv_counts), t), "alltoallv")

    def send(self, buf, peer, tag=0, dtype=None):
        a, n, t, _k = _view(buf, dtype, False)
        self._check(lib.weft_send_tag(self._c, a, n, t, peer, tag), "send")

    def recv(self, buf, peer, tag=0, dtype=None):
        a, n, t, _k = _view(buf, dtype, True)
        self._check(lib.weft_recv_tag(self._c, a, n, t, peer, tag), "recv")


class PS:
    """Parameter-server client (docs/PARAMETER_SERVER.md). Under weftrun -n W
    --servers K: PS(comm) on every rank; servers call serve(), workers
    register, push gradients, pull parameters, clock, shutdown. float32
    buffers only."""

    WORKER, SERVER = 1, 2

    def __init__(self, comm=None):
        h = ctypes.c_void_p()
        rc = lib.weft_ps_init(ctypes.byref(h), comm._c if comm else None, None)
        if rc:
            raise WeftError(rc, "weft: ps init: " + lib.weft_strerror(rc).decode())
        self._p = h

    def _check(self, rc, what):
        if rc:
            raise WeftError(rc, f"weft: ps {what}: " + (lib.weft_ps_error(self._p) or b"").decode())

    @property
    def is_server(self):
        return lib.weft_ps_role(self._p) == self.SERVER

    @property
    def rank(self):
        return lib.weft_ps_rank(self._p)

    def _f32(self, buf, writable):
        a, n, t, k = _view(buf, None, writable)
        if t != 0:
            raise TypeError("weft: the parameter server holds float32 tensors")
        return a, n, k

    def register(self, key, values):
        a, n, _k = self._f32(values, False)
        self._check(lib.weft_ps_register(self._p, key, a, n), "register")

    def push(self, key, grads):
        a, _n, _k = self._f32(grads, False)
        r = ctypes.c_void_p()
        self._check(lib.weft_ps_push(self._p, key, a, ctypes.byref(r)), "push")
        self._check(lib.weft_ps_wait(r), "push")

    def pull(self, key, params):
        a, _n, _k = self._f32(params, True)
        r = ctypes.c_void_p()
        self._check(lib.weft_ps_pull(self._p, key, a, ctypes.byref(r)), "pull")
        self._check(lib.weft_ps_wait(r), "pull")

    def clock(self):
        self._check(lib.weft_ps_clock(self._p), "clock")

    def barrier(self):
        self._check(lib.weft_ps_barrier(self._p), "barrier")

    def shutdown(self):
        self._check(lib.weft_ps_shutdown(self._p), "shutdown")

    def serve(self):
        self._check(lib.weft_ps_serve(self._p), "serve")

    def close(self):
        if self._p:
            lib.weft_ps_destroy(self._p)
            self._p = None


from .run import Run  # noqa: E402  (it uses WeftError and Comm above)
