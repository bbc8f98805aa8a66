"""The shared data types, errors, hashing and strict file-system helpers every layer uses."""
