"""torch.fx keeps the sparse layers whole, as it keeps nn.Linear: a traced model calls the layer.

fx's tracers treat only torch.nn's own modules as leaves and would trace into forward, where
the formats and kernels take real tensors. Each layer's forward hands an fx Proxy here first
and gets back one `call_module` node, so `torch.fx.symbolic_trace` (and tracers built on it,
such as Hugging Face's) record the layer itself; the GraphModule runs it as before.
"""

from __future__ import annotations

import torch
from torch import fx


def traced_call(module: torch.nn.Module, *args):
    """The call_module node of `module` when an fx tracer calls it with a Proxy, else None."""
    for arg in args:
        if isinstance(arg, fx.Proxy):
            tracer = arg.tracer
            return tracer.create_proxy("call_module", tracer.path_of_module(module), args, {})
    return None
