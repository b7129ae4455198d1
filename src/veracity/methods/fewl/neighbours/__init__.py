"""FEWL's neighbour questions for the laziness penalty: nearest neighbours by question embedding
(exact, or an approximate faiss index at scale, with its recall measured) and the random
neighbours of the paper's Table 8. Part of the FEWL method with no command of its own:
``--neighbours-index`` and ``--neighbours random`` on the FEWL commands choose them."""

from veracity.method import Part

PART = Part()
