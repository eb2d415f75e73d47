"""A training run from Python: the library's weft_run, the one weft-train
drives, with the same options (docs/TRAINING.md).

    import weft
    with weft.Run(model="gpt", data="builtin", tp=2, pp=2, steps=100) as run:
        while run.step() == weft.Run.STEP:
            print(run.info.step, run.info.loss)
        run.finish()

Under a launcher (weftrun, torchrun, mpirun, srun) the run joins the job
itself, as weft-train does; Run(comm=c) trains on a communicator of the
caller's instead. Options are weft-train's long options, as keywords (dashes
as underscores) or a dict; a flag takes True.
"""
import ctypes
import os
import sys
import types

from ._lib import lib

_LOG = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)


class _Info(ctypes.Structure):
    _fields_ = [("step", ctypes.c_long), ("steps", ctypes.c_long),
                ("first_step", ctypes.c_long), ("epoch", ctypes.c_double),
                ("loss", ctypes.c_float), ("gnorm", ctypes.c_float), ("lr", ctypes.c_double),
                ("correct", ctypes.c_int), ("seen", ctypes.c_int), ("skip", ctypes.c_int),
                ("bubble", ctypes.c_double), ("rank", ctypes.c_int), ("world", ctypes.c_int),
                ("lead", ctypes.c_int), ("global_batch", ctypes.c_int),
                ("mfu", ctypes.c_double), ("end", ctypes.c_long), ("elapsed", ctypes.c_double),
                ("rate", ctypes.c_double), ("quiet", ctypes.c_int),
                ("log_every", ctypes.c_long)]


def _sig(name, res, *args):
    f = getattr(lib, name)
    f.restype, f.argtypes = res, list(args)


P, I, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
_sig("weft_config_default", None, P)
_sig("weft_config_from_env", I, P)
_sig("weft_comm_init", I, ctypes.POINTER(P), P)
_sig("weft_comm_join", I, P, ctypes.POINTER(P))
_sig("weft_run_config_new", I, ctypes.POINTER(P))
_sig("weft_run_config_set", I, P, S, S)
_sig("weft_run_config_check", I, P, I)
_sig("weft_run_config_error", S, P)
_sig("weft_run_config_log", None, P, _LOG, P)
_sig("weft_run_config_free", None, P)
_sig("weft_run_open", I, P, P, I, ctypes.POINTER(P))
_sig("weft_run_step", I, P)
_sig("weft_run_finish", I, P)
_sig("weft_run_eval", I, P)
_sig("weft_run_save", I, P, S)
_sig("weft_run_close", I, P)
_sig("weft_run_error", S, P)
_sig("weft_run_info_get", I, P, ctypes.POINTER(_Info))
_sig("weft_run_comm", P, P)

# weft_config's first two fields are int rank, int world_size
_CONFIG_BYTES = 256


def _print_line(level, line):
    f = sys.stdout if level == Run.OUT else sys.stderr
    f.write(line if line.endswith("\n") else line + "\n")
    f.flush()


def _join(elastic, check):
    """The job's communicator (None alone), as weft-train joins: a
    replacement under weftrun --elastic (WEFT_JOIN=1) joins the running
    job. check(joining) runs before anything is joined."""
    from . import WeftError
    cfg = ctypes.create_string_buffer(_CONFIG_BYTES)
    lib.weft_config_default(cfg)
    several = lib.weft_config_from_env(cfg) == 0 and ctypes.c_int.from_buffer(cfg, 4).value > 1
    joining = several and elastic and os.environ.get("WEFT_JOIN") == "1"
    check(joining)
    if not several:
        return None, False
    h = ctypes.c_void_p()
    rc = lib.weft_comm_join(cfg, ctypes.byref(h)) if joining else \
        lib.weft_comm_init(ctypes.byref(h), cfg)
    if rc:
        raise WeftError(rc, "weft: cannot join the job: " + lib.weft_strerror(rc).decode())
    return h, joining


class Run:
    """One training run on this rank (weft_run). step() returns STEP (a step
    done), DONE (call finish()), RECOVERED (elastic: the membership changed;
    step again) or LEFT (elastic: this rank left; close()), and raises
    WeftError when the run cannot go on. log(level, line) receives the
    run's lines (default: OUT to stdout, WARN and NOTE to stderr)."""

    STEP, DONE, RECOVERED, LEFT, REJOIN = 0, 1, 2, 3, 4
    OUT, WARN, NOTE = 0, 1, 2

    def __init__(self, options=None, comm=None, log=_print_line, **kw):
        from . import WeftError
        self._run = None
        self._own_comm = None
        self._user_comm = comm
        opts = dict(options or {})
        opts.update(kw)
        cfg = ctypes.c_void_p()
        rc = lib.weft_run_config_new(ctypes.byref(cfg))
        if rc:
            raise WeftError(rc, "weft: run config: " + lib.weft_strerror(rc).decode())
        # the callback must outlive the run, which keeps a copy of it
        self._log = _LOG(lambda _a, level, line: log(level, line.decode(errors="replace"))) \
            if log else _LOG()
        try:
            lib.weft_run_config_log(cfg, self._log, None)
            elastic = False
            for k, v in opts.items():
                if v is False or v is None:
                    continue
                key = str(k).replace("_", "-")
                val = None if v is True else str(v).encode()
                elastic = elastic or key == "elastic"
                self._config(cfg, lib.weft_run_config_set(cfg, key.encode(), val))

            def check(joining):
                self._config(cfg, lib.weft_run_config_check(cfg, int(joining)))
            if comm is None:
                handle, joined = _join(elastic, check)
                self._own_comm = handle
            else:
                check(False)
                handle, joined = comm._c, False
            r = ctypes.c_void_p()
            rc = lib.weft_run_open(cfg, handle, int(joined), ctypes.byref(r))
            self._run = r if r.value else None
            if rc < 0:
                msg = (lib.weft_run_error(self._run) or b"").decode() if self._run else ""
                self.close()
                raise WeftError(rc, "weft: run: " + (msg or lib.weft_strerror(rc).decode()))
        finally:
            lib.weft_run_config_free(cfg)

    @staticmethod
    def _config(cfg, rc):
        from . import WeftError
        if rc:
            raise WeftError(rc, "weft: run: " + (lib.weft_run_config_error(cfg) or b"").decode())

    def _check(self, rc, what):
        from . import WeftError
        if rc < 0:
            msg = (lib.weft_run_error(self._run) or b"").decode()
            raise WeftError(rc, f"weft: run {what}: " + (msg or lib.weft_strerror(rc).decode()))
        return rc

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def step(self):
        """One training step (collective over the job)."""
        return self._check(lib.weft_run_step(self._run), "step")

    def train(self):
        """Every step, then finish(); returns DONE, or LEFT for a rank that
        left an elastic job."""
        while True:
            rc = self.step()
            if rc == self.DONE:
                self.finish()
                return rc
            if rc in (self.LEFT, self.REJOIN):
                return rc

    def finish(self):
        """The last averages, the checkpoint (save=), the summary and the
        final evaluation (unless no_eval)."""
        self._check(lib.weft_run_finish(self._run), "finish")

    def eval(self):
        self._check(lib.weft_run_eval(self._run), "eval")

    def save(self, path):
        self._check(lib.weft_run_save(self._run, os.fsencode(path)), "save")

    @property
    def info(self):
        """The last step's outcome and where the run is (weft_run_info)."""
        i = _Info()
        self._check(lib.weft_run_info_get(self._run, ctypes.byref(i)), "info")
        return types.SimpleNamespace(**{f: getattr(i, f) for f, _t in _Info._fields_})

    @property
    def comm(self):
        """The job's communicator now (membership changes replace it)."""
        from . import Comm
        h = lib.weft_run_comm(self._run) if self._run else None
        return Comm(ctypes.c_void_p(h)) if h else None

    def close(self):
        """Frees the run; a job this run joined itself is left too."""
        from . import WeftError
        h, rc = self._own_comm, 0
        if self._run:
            h = lib.weft_run_comm(self._run)
            rc = lib.weft_run_close(self._run)
            self._run = None
        if self._user_comm is not None:
            self._user_comm._c = ctypes.c_void_p(h) if h else None
            self._user_comm = None
        elif self._own_comm is not None:
            self._own_comm = None
            if h:
                drc = lib.weft_comm_destroy(h)
                rc = rc or drc
        if rc:
            raise WeftError(rc, "weft: run close: " + lib.weft_strerror(rc).decode())
