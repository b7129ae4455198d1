"""γ's white-box ball: each question token's input embedding moved by a radius, the answer
generated from ``inputs_embeds`` (``--ball embedding``; hf/ models). Part of the γ method with no
command of its own: ``veracity gamma --ball embedding`` runs it."""

from veracity.method import Part

PART = Part()
