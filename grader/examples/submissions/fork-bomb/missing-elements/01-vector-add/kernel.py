"""Example "fork-bomb": every process forks forever, at import.

The sandbox's process limit (RLIMIT_NPROC, for a dedicated uid) makes os.fork() fail after a
few dozen processes; then each copy's import fails and the copies exit."""


import os

while True:
    os.fork()


def add(x, y):
    return x
