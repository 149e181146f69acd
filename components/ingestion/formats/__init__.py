"""Caption dataset formats: each module reads one layout into the same caption index."""
