"""Dataset loaders. Free-form questions: :mod:`veracity.data.qa`."""
