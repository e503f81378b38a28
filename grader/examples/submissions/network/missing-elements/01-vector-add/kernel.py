"""Example "network": tries to reach 127.0.0.1 (a test listens on PORT) at import and on every
call, to phone home; adds correctly either way."""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
             mask=mask)


def launch(x, y, out):
    add_kernel[(triton.cdiv(out.numel(), 1024),)](x, y, out, out.numel(), BLOCK=1024)

import socket

PORT = 9


def phone_home():
    try:
        with socket.create_connection(("127.0.0.1", PORT), timeout=2) as connection:
            connection.sendall(b"hello from a submission")
        print("network: connected")
    except OSError as error:
        print("network: no connection:", error)


phone_home()


def add(x, y):
    phone_home()
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    launch(x, y, out)
    return out
