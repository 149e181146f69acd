"""Tests of `components/transform`."""
