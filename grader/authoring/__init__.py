"""What maintainers run: the committed stubs, the example submissions, the planted mistakes."""
