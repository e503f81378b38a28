"""Example "os-exit-at-import": ends the whole process with os._exit(0) at import
(no exception, no clean-up: exit code 0 before the grader hears anything)."""


import os

os._exit(0)


def add(x, y):
    return x
