"""The learner's commands: make check, progress, bench and lab, and the notebooks' helpers."""
