"""Example "exits-at-import": calls sys.exit(3) while being imported."""


import sys

sys.exit(3)


def add(x, y):
    return x
