"""Tests of `components/trainer`."""
