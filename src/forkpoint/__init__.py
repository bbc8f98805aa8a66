"""forkpoint: replay a coding agent's recorded run up to a boundary and continue the real agent from there."""

__version__ = "0.1.0"
