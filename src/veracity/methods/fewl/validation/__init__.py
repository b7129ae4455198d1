"""FEWL's measurement accuracy with the paper's ablations (Table 1), its streamed run and its
Figures 2 and 3 from a judge. Part of the FEWL method with no command of its own:
``veracity fewl validate`` is in :mod:`veracity.methods.fewl.cli`, beside the other modes it
shares options with."""

from veracity.method import Part

PART = Part()
