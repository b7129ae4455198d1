"""FEWL's answer selection: the best candidate per question (streamed in bounded memory),
exported as ICL prompts and a fine-tuning set. Part of the FEWL method with no command of its
own: ``veracity fewl select`` is in :mod:`veracity.methods.fewl.cli`, beside the other modes it
shares options with."""

from veracity.method import Part

PART = Part()
