"""Example "positional-pre-hook": adds with PyTorch in a ``triton.Config`` pre_hook passed by position.

Attack: the gate refuses ``pre_hook=`` written as a keyword, but ``triton.Config(kwargs,
num_warps, num_stages, num_ctas, maxnreg, pre_hook)`` takes the hook as its sixth positional
argument too. Triton (and the grader's stand-in for the autotuner on a CPU) calls a config's
pre_hook before each launch with every kernel argument in hand; this one writes x + y into the
output with PyTorch, and the kernel stores nothing.

Mechanism abused: hook parameters recognised by their keyword only.

Expected under the hardened grader: refused by the policy gate before anything runs, the line
named: a positional argument of triton.Config or triton.autotune is matched to its parameter
by the installed Triton's signature, and one that is a hook is refused as the keyword is. 0 for
the module.
"""

import torch
import triton
import triton.language as tl

from grader.validation import check_tensors

# Elements per program. A power of two (tl.arange needs one); 1024 keeps every load wide and
# gives the GPU thousands of programs to spread over its multiprocessors at large sizes.
BLOCK_SIZE = 1024


def sum_into_output(args):
    args["out_ptr"].copy_(args["x_ptr"] + args["y_ptr"])


@triton.autotune(configs=[triton.Config({"BLOCK_SIZE": BLOCK_SIZE}, 4, 3, 1, None, sum_into_output)], key=[])
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pass  # the work happened in the pre_hook, before this launch


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Return x + y for two tensors of the same shape, dtype and device."""
    check_tensors(("x", x), ("y", y))
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same shape, got {tuple(x.shape)} and "
                         f"{tuple(y.shape)}; this kernel does not broadcast.")
    # The kernel walks memory linearly, so strided inputs are made contiguous first.
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n_elements = out.numel()
    grid = (triton.cdiv(n_elements, BLOCK_SIZE),)
    add_kernel[grid](x, y, out, n_elements)
    return out


if __name__ == "__main__":
    from grader.check import self_check

    self_check(__file__)
