"""Text embedders; concrete ones are loaded lazily through :mod:`veracity.registry`."""
