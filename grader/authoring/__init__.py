"""What maintainers run: the committed stubs, the example submissions, the planted mistakes, the
order in which a parallel run of the suite starts its work, and the sweep of every case under many
secrets."""
