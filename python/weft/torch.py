"""Registers the torch.distributed backend "weft" (the C++ extension
_weft_torch over libweft). After ``import weft.torch``:

    dist.init_process_group("weft")     # env://, file://, tcp://, torchrun

Under weftrun, whose ranks carry WEFT_RANK / WEFT_WORLD_SIZE /
WEFT_MASTER_ADDR / WEFT_MASTER_PORT, torch's env:// variables are filled
from those when unset, so the same program runs under either launcher.
"""
import os

import torch.distributed as dist

from . import _weft_torch

_FROM_WEFT = {"RANK": "WEFT_RANK", "WORLD_SIZE": "WEFT_WORLD_SIZE",
              "LOCAL_RANK": "WEFT_LOCAL_RANK", "LOCAL_WORLD_SIZE": "WEFT_LOCAL_SIZE",
              "MASTER_ADDR": "WEFT_MASTER_ADDR", "MASTER_PORT": "WEFT_MASTER_PORT"}
if "RANK" not in os.environ and "WEFT_RANK" in os.environ:
    for k, w in _FROM_WEFT.items():
        if k not in os.environ and w in os.environ:
            os.environ[k] = os.environ[w]


def _create(store, rank, size, timeout):
    return _weft_torch.create_process_group(store, rank, size, timeout)


if not hasattr(dist.Backend, "WEFT"):
    dist.Backend.register_backend("weft", _create)

version = _weft_torch.version
