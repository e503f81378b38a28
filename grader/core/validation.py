"""Input checks that the modules' public functions share, with messages that say what to do."""

from __future__ import annotations

import torch

from grader.core import device

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_tensors(*named: tuple[str, torch.Tensor], dtypes=FLOAT_DTYPES, ndim: int | None = None) -> None:
    """Raise TypeError/ValueError unless every tensor is usable by a kernel on this device.

    All tensors must share one dtype (from ``dtypes``) and live on the device kernels run on;
    ``ndim`` fixes their number of dimensions.
    """
    where = device.torch_device()
    first_name, first = named[0]
    for name, tensor in named:
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}.")
        if tensor.dtype not in dtypes:
            allowed = ", ".join(str(d).replace("torch.", "") for d in dtypes)
            raise TypeError(
                f"{name} has dtype {tensor.dtype}; this kernel supports {allowed}. "
                f"Convert it first, e.g. {name}.to(torch.float32)."
            )
        if tensor.dtype != first.dtype:
            raise TypeError(f"{name} is {tensor.dtype} but {first_name} is {first.dtype}; pass tensors of one dtype.")
        if tensor.device.type != where.type:
            raise ValueError(
                f"{name} is on {tensor.device}, but kernels run on {where} here; "
                f"move it with {name}.to('{where.type}')."
            )
        if ndim is not None and tensor.dim() != ndim:
            raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(tensor.shape)}.")
