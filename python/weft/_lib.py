"""libweft through ctypes: the library next to this package (make python
copies it here), else the one the dynamic loader finds."""
import ctypes
import ctypes.util
import os

_here = os.path.dirname(os.path.abspath(__file__))


def _load():
    tried = []
    for name in (os.path.join(_here, "libweft.so"), ctypes.util.find_library("weft"), "libweft.so"):
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            tried.append(f"{name}: {e}")
    raise ImportError("weft: cannot load libweft.so (" + "; ".join(tried) + ")")


lib = _load()
P = ctypes.c_void_p
SZ = ctypes.c_size_t
I = ctypes.c_int


def _sig(name, res, *args):
    f = getattr(lib, name)
    f.restype, f.argtypes = res, list(args)


_sig("weft_strerror", ctypes.c_char_p, I)
_sig("weft_version", ctypes.c_char_p)
_sig("weft_comm_init_env", I, ctypes.POINTER(P))
_sig("weft_comm_destroy", I, P)
_sig("weft_comm_abort", I, P)
_sig("weft_comm_rank", I, P)
_sig("weft_comm_size", I, P)
_sig("weft_comm_local_rank", I, P)
_sig("weft_comm_error", ctypes.c_char_p, P)
_sig("weft_comm_split", I, P, I, I, ctypes.POINTER(P))
_sig("weft_barrier", I, P)
_sig("weft_broadcast", I, P, P, SZ, I, I)
_sig("weft_reduce", I, P, P, P, SZ, I, I, I)
_sig("weft_allreduce", I, P, P, P, SZ, I, I)
_sig("weft_gather", I, P, P, P, SZ, I, I)
_sig("weft_scatter", I, P, P, P, SZ, I, I)
_sig("weft_allgather", I, P, P, P, SZ, I)
_sig("weft_reduce_scatter", I, P, P, P, SZ, I, I)
_sig("weft_alltoall", I, P, P, P, SZ, I)
_sig("weft_alltoallv", I, P, P, P, P, P, P, P, I)
_sig("weft_send_tag", I, P, P, SZ, I, I, I)
_sig("weft_recv_tag", I, P, P, SZ, I, I, I)
_sig("weft_ps_init", I, ctypes.POINTER(P), P, P)
_sig("weft_ps_destroy", None, P)
_sig("weft_ps_role", I, P)
_sig("weft_ps_rank", I, P)
_sig("weft_ps_num_workers", I, P)
_sig("weft_ps_num_servers", I, P)
_sig("weft_ps_error", ctypes.c_char_p, P)
_sig("weft_ps_register", I, P, ctypes.c_uint32, P, SZ)
_sig("weft_ps_push", I, P, ctypes.c_uint32, P, ctypes.POINTER(P))
_sig("weft_ps_pull", I, P, ctypes.c_uint32, P, ctypes.POINTER(P))
_sig("weft_ps_wait", I, P)
_sig("weft_ps_clock", I, P)
_sig("weft_ps_barrier", I, P)
_sig("weft_ps_shutdown", I, P)
_sig("weft_ps_serve", I, P)
