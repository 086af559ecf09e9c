"""The Markov-chain study (``hmmtf markov-sweep``)."""
