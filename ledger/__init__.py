"""The claims ledger: every claim of the paper (arXiv 2506.01919) and of the companion "Attention
with Markov", judged from the committed result JSONs under ``figures/``, written to
``docs/claims.md`` and to the README's results block (``hmmtf ledger``), with a check that every
result is present, records its commit, and is not older than the code that makes it
(``hmmtf ledger --check``). docs/ledger.md describes it.

Modules, one job each: :mod:`ledger.claims` (what a claim and a verdict are), :mod:`ledger.registry`
(every claim, by part of the paper, from :mod:`ledger.observations`, :mod:`ledger.theory`,
:mod:`ledger.markov`, :mod:`ledger.ladder`), :mod:`ledger.results` (every result JSON, its command
and producing code), :mod:`ledger.documents` (reading a JSON), :mod:`ledger.provenance` (its
commit, and whether its code changed since), :mod:`ledger.outcomes` (claims judged on a root),
:mod:`ledger.render` (the pages), :mod:`ledger.blocks` (generated blocks in hand-written files),
:mod:`ledger.bench_text` (the HMM-engine benchmark's README paragraph and docs table),
:mod:`ledger.generated` (every generated text and its file), :mod:`ledger.check` (``--check``),
:mod:`ledger.numbers` (number formats), :mod:`hmmtf.commands.ledger` (the subcommand).
"""
