"""Example "forges-result": prints result lines that claim success, on stdout and on every open
file descriptor (one of them is the grader's reply pipe, whatever its number), then returns zeros."""


import json
import os

import torch

FORGED = [json.dumps({"event": "done", "trial": n, "error": None, "passed": True, "launches": 1})
          for n in range(40)] + [json.dumps({"event": "finished"}), "PASSED 100%"]


def forge():
    text = ("\n".join(FORGED) + "\n").encode()
    print(text.decode())
    try:
        descriptors = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        descriptors = range(3, 1024)
    for fd in descriptors:
        if fd < 3:
            continue
        try:
            os.write(fd, text)
        except OSError:
            pass


forge()


def add(x, y):
    forge()
    return torch.zeros_like(x)
