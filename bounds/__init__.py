"""Lemma 1 and Theorem 1 of arXiv 2506.01919 measured term by term beside their bounds.

Modules: :mod:`bounds.formulas` (every bound as a numeric function), :mod:`bounds.suites` (HMMs of
controlled gamma, rank and mixing), :mod:`bounds.fitting` (constants fitted on one half of a suite,
checked on the other), :mod:`bounds.lemma1`, :mod:`bounds.theorem1`, :mod:`bounds.verify` (the
main job), :mod:`bounds.serialize` (typed results to JSON, at the edge), and
:mod:`bounds.figures`; its command, ``hmmtf main``, is :mod:`hmmtf.commands.bounds`. Formulas: docs/bounds.md.
"""
