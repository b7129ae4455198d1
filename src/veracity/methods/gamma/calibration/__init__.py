"""Calibration of γ: a monotone map γ -> P(correct) fitted on validated runs, the verdict
thresholds, and the live trust score that applies them (part of the γ method:
``veracity calibrate``; ``veracity.trust`` and the Truster are in γ's api)."""

from veracity.method import Command, Part

PART = Part(commands=(Command("veracity.methods.gamma.calibration.cli:calibrate_command"),))
