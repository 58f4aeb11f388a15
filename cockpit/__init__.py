"""Cockpit: pilot every phase of a training campaign before renting the GPU for it."""

__version__ = "0.1.0"
