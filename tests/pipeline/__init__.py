"""Tests of `pipeline`."""
