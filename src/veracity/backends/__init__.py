"""Model backends; concrete ones are loaded lazily through :mod:`veracity.registry`."""
