"""Log-probability baseline: mean token log-probability, minimum token probability, mean token
entropy and perplexity of the greedy answer, from its own call."""
