"""Tests of `components/evaluation`."""
