"""Inside the networks (``hmmtf analyze``)."""
