"""The course's shared ground: everything else in the grader may use it; it imports nothing above it."""
