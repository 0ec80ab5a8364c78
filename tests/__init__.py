"""The test suite, a package so test modules import shared helpers as `tests.<module>`."""
