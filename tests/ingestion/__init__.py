"""Tests of `components/ingestion`."""
