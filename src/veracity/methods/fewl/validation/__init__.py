"""FEWL's measurement accuracy with the paper's ablations (``fewl validate``) and its Figures 2
and 3 from a judge (part of the FEWL method; the command is in :mod:`veracity.methods.fewl.cli`)."""
