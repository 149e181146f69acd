"""Serving: the atomic, versioned Pusher (pusher.py) and the command-line captioner for pushed
SavedModels (captioner.py)."""
