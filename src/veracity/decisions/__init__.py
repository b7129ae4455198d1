"""Decisions on scored answers: risk-controlled thresholds (Learn-then-Test), policies that turn
a score into answer / abstain / escalate, and the labels fed back to recalibrate them."""
