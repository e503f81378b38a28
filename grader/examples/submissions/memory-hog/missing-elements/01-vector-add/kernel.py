"""Example "memory-hog": allocates (and touches) 64 MiB blocks of host memory until none is left.

The sandbox's RLIMIT_DATA turns that into a MemoryError at import."""


HOG = []
while True:
    HOG.append(bytearray(64 << 20))  # bytearray zero-fills: the memory is really used


def add(x, y):
    return x
