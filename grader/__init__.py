"""Harness, checks, benchmarks and grading for the Triton kernel curriculum.

Importing the package selects the device (CUDA, else Triton's interpreter) before any
learner code is loaded.
"""

from grader import device as _device

_device.select()

__version__ = "0.1.0"
