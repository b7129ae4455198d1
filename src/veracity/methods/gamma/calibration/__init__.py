"""Calibration of γ: a monotone map γ -> P(correct) fitted on validated runs, and the verdict
thresholds (part of the γ method: ``veracity calibrate``)."""

from veracity.method import Command, Part

PART = Part(commands=(Command("veracity.methods.gamma.calibration.cli:calibrate_command"),))
