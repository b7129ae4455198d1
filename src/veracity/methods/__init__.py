"""The three trust methods: harmonic gamma, deception benchmarking, FEWL."""
