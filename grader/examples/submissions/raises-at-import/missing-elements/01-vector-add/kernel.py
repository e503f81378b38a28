"""Example "raises-at-import": uses a Triton function that does not exist, at import."""


import triton.language as tl

SCALE = tl.not_a_function(2)  # AttributeError while the module is imported


def add(x, y):
    return x
