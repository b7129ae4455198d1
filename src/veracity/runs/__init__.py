"""Orchestration: load data and models, run a method's stages, write a run directory."""
