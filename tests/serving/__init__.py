"""Tests of `components/serving`."""
