"""The instructor's grading: the run phase and its timing, records, nbgrader's course, feedback, release."""
