"""A weft training-engine model from Python, over libweft.so's weft_model_*
and weft_optim_* (ctypes): its tensors as writable memoryviews of the flat
parameter and gradient buffers, forward and backward on token batches, and
the engine's optimiser over the whole buffer. No NumPy or torch needed;
torch.frombuffer(model.tensor("name"), dtype=torch.float32) views one.

    m = weft.model.Model("llama:vocab=97,ctx=16,layers=2,heads=4,kv_heads=2,dim=32,ffn=88")
    loss = m.forward(tokens, targets, batch=2, seq=16)
    m.zero_grad(); m.backward()
"""
import ctypes

from ._lib import lib, P, SZ, I

F = ctypes.POINTER(ctypes.c_float)
I32 = ctypes.c_int32


class _Config(ctypes.Structure):
    # weft_model_config: 4-byte fields (include/weft.h)
    _fields_ = [("type", I32), ("n_widths", I32), ("widths", I32 * 9), ("activation", I32),
                ("vocab", I32), ("ctx", I32), ("n_layer", I32), ("n_head", I32),
                ("d_model", I32), ("n_kv_head", I32), ("ffn", I32), ("tied", I32),
                ("rope_theta", ctypes.c_float), ("rms_eps", ctypes.c_float),
                ("experts", I32), ("topk", I32), ("moe_ffn", I32), ("shared", I32),
                ("router", I32), ("moe_bias", I32), ("capacity", ctypes.c_float),
                ("aux_loss", ctypes.c_float), ("z_loss", ctypes.c_float)]


class _TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("offset", SZ), ("numel", SZ), ("ndim", I),
                ("shape", I * 4), ("whole_offset", SZ), ("whole_numel", SZ), ("block", I)]


class _OptimConfig(ctypes.Structure):
    _fields_ = [("kind", I32), ("momentum", ctypes.c_float), ("nesterov", I32),
                ("weight_decay", ctypes.c_float), ("beta1", ctypes.c_float),
                ("beta2", ctypes.c_float), ("eps", ctypes.c_float)]


def _sig(name, res, *args):
    f = getattr(lib, name)
    f.restype, f.argtypes = res, list(args)


_sig("weft_model_config_parse", I, ctypes.c_char_p, ctypes.POINTER(_Config))
_sig("weft_model_config_format", I, ctypes.POINTER(_Config), ctypes.c_char_p, SZ)
_sig("weft_model_create", I, ctypes.POINTER(P), ctypes.POINTER(_Config), ctypes.c_uint64)
_sig("weft_model_destroy", None, P)
_sig("weft_model_params", F, P, ctypes.POINTER(SZ))
_sig("weft_model_grads", F, P, ctypes.POINTER(SZ))
_sig("weft_model_tensor_count", I, P)
_sig("weft_model_tensor_info", I, P, I, ctypes.POINTER(_TensorInfo))
_sig("weft_model_forward", I, P, P, P, I, I, ctypes.POINTER(ctypes.c_float))
_sig("weft_model_backward", I, P)
_sig("weft_model_zero_grad", I, P)
_sig("weft_model_logits", F, P, ctypes.POINTER(I), ctypes.POINTER(I))
_sig("weft_model_set_threads", I, P, I)
_sig("weft_model_set_matmul", I, P, ctypes.c_char_p)
_sig("weft_optim_config_default", None, ctypes.POINTER(_OptimConfig), I)
_sig("weft_optim_create", I, ctypes.POINTER(P), ctypes.POINTER(_OptimConfig), SZ, SZ)
_sig("weft_optim_destroy", None, P)
_sig("weft_optim_step", I, P, F, F, ctypes.c_float)


def _check(rc, what):
    if rc != 0:
        from . import WeftError
        raise WeftError(rc, f"{what}: {lib.weft_strerror(rc).decode()}")


def _floats(ptr, n):
    return memoryview((ctypes.c_float * n).from_address(ctypes.addressof(ptr.contents))).cast("B").cast("f")


class Model:
    """One whole model (every block, one rank) of a --model spec."""

    def __init__(self, spec, seed=1):
        self._cfg = _Config()
        _check(lib.weft_model_config_parse(spec.encode(), ctypes.byref(self._cfg)), spec)
        self._h = P()
        _check(lib.weft_model_create(ctypes.byref(self._h), ctypes.byref(self._cfg), seed),
               "weft_model_create")
        n = SZ()
        self._p = lib.weft_model_params(self._h, ctypes.byref(n))
        self._g = lib.weft_model_grads(self._h, ctypes.byref(n))
        self.numel = n.value
        self._logits_cols = 0

    def close(self):
        if self._h:
            lib.weft_model_destroy(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    @property
    def spec(self):
        buf = ctypes.create_string_buffer(512)
        lib.weft_model_config_format(ctypes.byref(self._cfg), buf, 512)
        return buf.value.decode()

    def tensors(self):
        """[(name, offset, shape)] in flat-buffer order."""
        out = []
        for i in range(lib.weft_model_tensor_count(self._h)):
            t = _TensorInfo()
            _check(lib.weft_model_tensor_info(self._h, i, ctypes.byref(t)), "tensor_info")
            out.append((t.name.decode(), t.offset, tuple(t.shape[:t.ndim])))
        return out

    def params(self):
        """The flat parameter buffer (float32, writable)."""
        return _floats(self._p, self.numel)

    def grads(self):
        return _floats(self._g, self.numel)

    def set_threads(self, n):
        _check(lib.weft_model_set_threads(self._h, n), "set_threads")

    def set_matmul(self, name):
        return lib.weft_model_set_matmul(self._h, name.encode()) == 0

    def forward(self, tokens, targets, batch, seq):
        """tokens, targets: sequences of batch*seq ints (targets None:
        logits only); returns the mean loss."""
        n = batch * seq
        tok = (I32 * n)(*tokens)
        tgt = (I32 * n)(*targets) if targets is not None else None
        loss = ctypes.c_float()
        _check(lib.weft_model_forward(self._h, ctypes.cast(tok, P),
                                      ctypes.cast(tgt, P) if tgt is not None else None,
                                      batch, seq, ctypes.byref(loss)), "forward")
        return loss.value

    def logits(self):
        """The last forward's logits, flat [rows * cols], and cols."""
        r, c = I(), I()
        p = lib.weft_model_logits(self._h, ctypes.byref(r), ctypes.byref(c))
        return _floats(p, r.value * c.value), c.value

    def backward(self):
        _check(lib.weft_model_backward(self._h), "backward")

    def zero_grad(self):
        _check(lib.weft_model_zero_grad(self._h), "zero_grad")


class AdamW:
    """The engine's AdamW over a model's whole buffer (torch's defaults
    unless given)."""

    def __init__(self, model, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-8):
        c = _OptimConfig()
        lib.weft_optim_config_default(ctypes.byref(c), 2)
        c.weight_decay, c.beta1, c.beta2, c.eps = weight_decay, betas[0], betas[1], eps
        self._m = model
        self._h = P()
        _check(lib.weft_optim_create(ctypes.byref(self._h), ctypes.byref(c), 0, model.numel),
               "weft_optim_create")

    def step(self, lr):
        _check(lib.weft_optim_step(self._h, self._m._p, self._m._g, lr), "optim step")

    def close(self):
        if self._h:
            lib.weft_optim_destroy(self._h)
            self._h = None

    def __del__(self):
        self.close()
