"""FEWL's answer selection (``fewl select``): the best candidate per question, ICL prompts and a
fine-tuning set (part of the FEWL method; the command is in :mod:`veracity.methods.fewl.cli`)."""
